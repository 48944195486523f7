// The gRPC services: thin adapters that convert messages, delegate to the Engine and map
// statuses (TensorFlow Serving's prediction_service_impl pattern). No model logic lives here.
#ifndef GRAPHBANDIT_SERVER_SERVICES_H_
#define GRAPHBANDIT_SERVER_SERVICES_H_

#include <atomic>
#include <functional>

#include "core/model/engine.h"
#include "graphbandit/v1/bandit.grpc.pb.h"
#include "server/metrics.h"
#include "server/security.h"
#include "server/worker_pool.h"

namespace graphbandit::server {

// BanditService on gRPC's callback API: a SelectArm that needs no wait is answered on the
// callback thread that received it (no hand-off, no thread per request). A ReportReward is
// joined and logged there too, and answered by the model's log once a sync covers its record
// (OperationLog::NotifyDurable): no thread is parked per reward. Calls that wait (a
// reward under back-pressure or in cluster mode, a SelectArm with min_model_version) run on
// `waiters`, a fixed pool, and are refused with RESOURCE_EXHAUSTED when its queue is full.
// Rewards not yet answered are bounded the same way: at most `waiters->max_queued()` at once
// (a disk whose syncs stall must not grow them without limit); more are refused likewise.
class BanditServiceImpl final : public v1::BanditService::CallbackService {
 public:
  // Every method first checks `token` (an empty token admits every call).
  BanditServiceImpl(Engine* engine, ServerMetrics* metrics, WorkerPool* waiters,
                    BearerToken token = {})
      : engine_(engine), metrics_(metrics), waiters_(waiters), token_(std::move(token)) {}

  grpc::ServerUnaryReactor* SelectArm(grpc::CallbackServerContext* context,
                                      const v1::SelectArmRequest* request,
                                      v1::SelectArmResponse* response) override;
  grpc::ServerUnaryReactor* ReportReward(grpc::CallbackServerContext* context,
                                         const v1::ReportRewardRequest* request,
                                         v1::ReportRewardResponse* response) override;

  // The calls themselves, on whichever thread runs them.
  grpc::Status DoSelectArm(grpc::ServerContextBase* context, const v1::SelectArmRequest* request,
                           v1::SelectArmResponse* response);

 private:
  // A reward's answer in `response` (and the reward metrics); the call's status.
  grpc::Status AnswerReward(const absl::StatusOr<RewardResult>& result,
                            v1::ReportRewardResponse* response);
  grpc::Status PoolFull() const;
  grpc::Status TooManyRewardsWaiting() const;
  // Runs `call` on the pool and finishes the reactor with its status.
  grpc::ServerUnaryReactor* OnPool(grpc::CallbackServerContext* context, const char* method,
                                   std::function<grpc::Status()> call);

  Engine* engine_;
  ServerMetrics* metrics_;
  WorkerPool* waiters_;
  BearerToken token_;
  // ReportReward calls admitted and not yet answered, on either path.
  std::atomic<int> rewards_waiting_{0};
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
  grpc::Status SetServingMode(grpc::ServerContext* context,
                              const v1::SetServingModeRequest* request,
                              v1::SetServingModeResponse* response) override;

 private:
  Engine* engine_;
  ServerMetrics* metrics_;
  BearerToken token_;
};

}  // namespace graphbandit::server

#endif  // GRAPHBANDIT_SERVER_SERVICES_H_
