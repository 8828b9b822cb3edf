#include "server/rpc/malformed_request.h"

#include <mutex>
#include <string>

#include <google/protobuf/stubs/logging.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "server/common/log.h"
#include "server/common/log_rate_limiter.h"
#include "server/rpc/status_mapping.h"

namespace odeserve::rpc {
namespace {

using grpc::experimental::InterceptionHookPoints;
using grpc::experimental::ServerRpcInfo;

// libprotobuf's last error on this thread: gRPC parses a request and then runs the interceptors
// on the same thread, so a parse failure's reason (e.g. which string field is not UTF-8) is here.
thread_local std::string last_protobuf_error;

std::string TakeLastProtobufError() {
  std::string error;
  error.swap(last_protobuf_error);
  return error;
}

void HandleProtobufLog(google::protobuf::LogLevel level, const char* filename, int line,
                       const std::string& message) {
  if (level >= google::protobuf::LOGLEVEL_ERROR) last_protobuf_error = message;
  static std::mutex mutex;
  static LogRateLimiter limiter(/*burst=*/5, absl::Seconds(10));
  int64_t suppressed = 0;
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (!limiter.Admit(absl::Now(), &suppressed)) return;
  }
  std::string text = absl::StrCat("libprotobuf (", filename, ":", line, "): ", message);
  if (suppressed > 0) absl::StrAppend(&text, " [", suppressed, " earlier libprotobuf lines not written]");
  Log(level >= google::protobuf::LOGLEVEL_ERROR     ? LogLevel::kError
      : level == google::protobuf::LOGLEVEL_WARNING ? LogLevel::kWarning
                                                    : LogLevel::kInfo,
      text);
}

// "/odeserve.v1.Inference/Embed" -> "Embed", the method label of the request metrics.
std::string MethodLabel(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

class MalformedRequestInterceptor final : public grpc::experimental::Interceptor {
 public:
  MalformedRequestInterceptor(ServerRpcInfo* info, core::InferenceCore* core)
      : method_(info->method() != nullptr ? info->method() : ""), core_(core) {}

  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(InterceptionHookPoints::POST_RECV_MESSAGE) && !seen_message_) {
      seen_message_ = true;
      std::string reason = TakeLastProtobufError();
      // A unary or server-streaming call's one request, which gRPC could not parse.
      if (methods->GetRecvMessage() == nullptr) {
        received_ = absl::Now();
        refusal_ = absl::InvalidArgumentError(absl::StrCat(
            method_.empty() ? "the request" : method_.substr(1), ": the request is not a valid protobuf message of "
            "the method's request type (",
            absl::StrContains(reason, "UTF-8") ? reason : "truncated or malformed bytes", ")"));
      }
    }
    if (!refusal_.ok() && methods->QueryInterceptionHookPoint(InterceptionHookPoints::PRE_SEND_STATUS)) {
      methods->ModifySendStatus(ToGrpcStatus(refusal_));
      core_->RecordServerCall(MethodLabel(method_), refusal_, absl::Now() - received_);
    }
    methods->Proceed();
  }

 private:
  const std::string method_;
  core::InferenceCore* const core_;
  bool seen_message_ = false;
  absl::Status refusal_;
  absl::Time received_;
};

class MalformedRequestInterceptorFactory final : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  explicit MalformedRequestInterceptorFactory(core::InferenceCore* core) : core_(core) {}

  grpc::experimental::Interceptor* CreateServerInterceptor(ServerRpcInfo* info) override {
    // Client-streaming and bidi calls (reflection) read later messages themselves, and a read
    // that ends the stream looks like a missing message: leave them alone.
    if (info->type() != ServerRpcInfo::Type::UNARY && info->type() != ServerRpcInfo::Type::SERVER_STREAMING) {
      return nullptr;
    }
    return new MalformedRequestInterceptor(info, core_);
  }

 private:
  core::InferenceCore* const core_;
};

}  // namespace

std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface> MakeMalformedRequestInterceptorFactory(
    core::InferenceCore* core) {
  return std::make_unique<MalformedRequestInterceptorFactory>(core);
}

void InstallProtobufLogHandler() { google::protobuf::SetLogHandler(&HandleProtobufLog); }

}  // namespace odeserve::rpc
