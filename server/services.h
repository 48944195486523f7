// The gRPC services: thin adapters that convert messages, delegate to the Engine and map
// statuses (TensorFlow Serving's prediction_service_impl pattern). No model logic lives here.
#ifndef GRAPHBANDIT_SERVER_SERVICES_H_
#define GRAPHBANDIT_SERVER_SERVICES_H_

#include "core/model/engine.h"
#include "graphbandit/v1/bandit.grpc.pb.h"
#include "server/metrics.h"
#include "server/security.h"

namespace graphbandit::server {

class BanditServiceImpl final : public v1::BanditService::Service {
 public:
  // Every method first checks `token` (an empty token admits every call).
  BanditServiceImpl(Engine* engine, ServerMetrics* metrics, BearerToken token = {})
      : engine_(engine), metrics_(metrics), token_(std::move(token)) {}

  grpc::Status SelectArm(grpc::ServerContext* context, const v1::SelectArmRequest* request,
                         v1::SelectArmResponse* response) override;
  grpc::Status ReportReward(grpc::ServerContext* context, const v1::ReportRewardRequest* request,
                            v1::ReportRewardResponse* response) override;

 private:
  Engine* engine_;
  ServerMetrics* metrics_;
  BearerToken token_;
};

class AdminServiceImpl final : public v1::AdminService::Service {
 public:
  // Every method first checks `token` (an empty token admits every call).
  AdminServiceImpl(Engine* engine, ServerMetrics* metrics, BearerToken token = {})
      : engine_(engine), metrics_(metrics), token_(std::move(token)) {}

  grpc::Status AddUsers(grpc::ServerContext* context, const v1::AddUsersRequest* request,
                        v1::AddUsersResponse* response) override;
  grpc::Status AddEdges(grpc::ServerContext* context, const v1::AddEdgesRequest* request,
                        v1::AddEdgesResponse* response) override;
  grpc::Status RemoveEdges(grpc::ServerContext* context, const v1::RemoveEdgesRequest* request,
                           v1::RemoveEdgesResponse* response) override;
  grpc::Status DescribeModel(grpc::ServerContext* context, const v1::DescribeModelRequest* request,
                             v1::ModelDescription* response) override;
  grpc::Status ListModels(grpc::ServerContext* context, const v1::ListModelsRequest* request,
                          v1::ListModelsResponse* response) override;

 private:
  Engine* engine_;
  ServerMetrics* metrics_;
  BearerToken token_;
};

}  // namespace graphbandit::server

#endif  // GRAPHBANDIT_SERVER_SERVICES_H_
