// absl::Status (core) to grpc::Status (wire): the canonical codes are the same numbers.
#ifndef GRAPHBANDIT_SERVER_STATUS_UTIL_H_
#define GRAPHBANDIT_SERVER_STATUS_UTIL_H_

#include <grpcpp/support/status.h>

#include <string>

#include "absl/status/status.h"

namespace graphbandit::server {

inline grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()));
}

}  // namespace graphbandit::server

#endif  // GRAPHBANDIT_SERVER_STATUS_UTIL_H_
