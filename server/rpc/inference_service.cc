#include "server/rpc/inference_service.h"

#include <chrono>
#include <deque>
#include <mutex>
#include <optional>

#include "absl/time/time.h"
#include "server/rpc/status_mapping.h"
#include "server/rpc/unary_call.h"

namespace odeserve::rpc {

// Runs an asynchronous core call and finishes the reactor with its status.
template <typename Request, typename Response, typename CoreMethod>
grpc::ServerUnaryReactor* InferenceService::Async(CoreMethod method, const char* name,
                                                  grpc::CallbackServerContext* context,
                                                  const Request* request, Response* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  if (auto status = Authorize(auth_, *context, core_, name); !status.ok()) {
    reactor->Finish(ToGrpcStatus(status));
    return reactor;
  }
  (core_->*method)(MakeCallContext(context), *request, response,
                   [reactor](absl::Status status) { reactor->Finish(ToGrpcStatus(status)); });
  return reactor;
}

core::CallContext MakeCallContext(grpc::CallbackServerContext* context) {
  core::CallContext call;
  call.received = absl::Now();
  const auto deadline = context->deadline();
  if (deadline != std::chrono::system_clock::time_point::max()) {
    call.deadline = absl::FromChrono(deadline);
  }
  call.cancelled = [context] { return context->IsCancelled(); };
  return call;
}

grpc::ServerUnaryReactor* InferenceService::Embed(grpc::CallbackServerContext* context,
                                                  const v1::EmbedRequest* request,
                                                  v1::EmbedResponse* response) {
  return Async(&core::InferenceCore::Embed, "Embed", context, request, response);
}

grpc::ServerUnaryReactor* InferenceService::Classify(grpc::CallbackServerContext* context,
                                                     const v1::ClassifyRequest* request,
                                                     v1::ClassifyResponse* response) {
  return Async(&core::InferenceCore::Classify, "Classify", context, request, response);
}

grpc::ServerUnaryReactor* InferenceService::Translate(grpc::CallbackServerContext* context,
                                                      const v1::TranslateRequest* request,
                                                      v1::TranslateResponse* response) {
  return Async(&core::InferenceCore::Translate, "Translate", context, request, response);
}

namespace {

// Writes the core's messages in order, one write in flight at a time (gRPC's rule), and
// finishes once the core is done and everything queued has been written. Messages arrive on a
// model's batcher thread; gRPC calls OnWriteDone on its own threads.
class TranslateStreamReactor : public grpc::ServerWriteReactor<v1::TranslateStreamResponse> {
 public:
  void Write(v1::TranslateStreamResponse message) {
    std::unique_lock<std::mutex> lock(mutex_);
    if (broken_) return;  // the client is gone; the core stops at its next cancellation check
    queue_.push_back(std::move(message));
    if (!writing_) StartNextLocked(lock);
  }
  void FinishWith(const grpc::Status& status) {
    std::unique_lock<std::mutex> lock(mutex_);
    status_ = status;
    if (!writing_) FinishLocked(lock);
  }
  void OnWriteDone(bool ok) override {
    std::unique_lock<std::mutex> lock(mutex_);
    writing_ = false;
    if (!ok) {
      broken_ = true;
      queue_.clear();
    }
    if (!queue_.empty()) {
      StartNextLocked(lock);
    } else if (status_) {
      FinishLocked(lock);
    }
  }
  void OnDone() override { delete this; }

 private:
  void StartNextLocked(std::unique_lock<std::mutex>& lock) {
    current_ = std::move(queue_.front());
    queue_.pop_front();
    writing_ = true;
    lock.unlock();
    StartWrite(&current_);
  }
  void FinishLocked(std::unique_lock<std::mutex>& lock) {
    if (finished_ || !queue_.empty()) return;
    finished_ = true;
    const grpc::Status status = *status_;
    lock.unlock();
    Finish(status);
  }

  std::mutex mutex_;
  std::deque<v1::TranslateStreamResponse> queue_;
  v1::TranslateStreamResponse current_;  // must outlive its StartWrite
  bool writing_ = false;
  bool broken_ = false;
  bool finished_ = false;
  std::optional<grpc::Status> status_;  // set once the core is done
};

}  // namespace

grpc::ServerWriteReactor<v1::TranslateStreamResponse>* InferenceService::TranslateStream(
    grpc::CallbackServerContext* context, const v1::TranslateRequest* request) {
  auto* reactor = new TranslateStreamReactor();
  if (auto status = Authorize(auth_, *context, core_, "TranslateStream"); !status.ok()) {
    reactor->FinishWith(ToGrpcStatus(status));
    return reactor;
  }
  core_->TranslateStream(
      MakeCallContext(context), *request,
      [reactor](v1::TranslateStreamResponse message) { reactor->Write(std::move(message)); },
      [reactor](absl::Status status) { reactor->FinishWith(ToGrpcStatus(status)); });
  return reactor;
}

// Metadata calls are answered on the RPC thread. They call the core directly rather than through
// a member-function pointer: GCC 12 under -fsanitize=address,undefined miscompiled that call
// inside AnswerNow (it read `this` from a register it had not loaded).
grpc::ServerUnaryReactor* InferenceService::ListModels(grpc::CallbackServerContext* context,
                                                       const v1::ListModelsRequest* request,
                                                       v1::ListModelsResponse* response) {
  return AnswerNow(context, auth_, /*authenticate=*/true, core_, "ListModels",
                   [&] { return core_->ListModels(*request, response); });
}

grpc::ServerUnaryReactor* InferenceService::GetModel(grpc::CallbackServerContext* context,
                                                     const v1::GetModelRequest* request,
                                                     v1::GetModelResponse* response) {
  return AnswerNow(context, auth_, /*authenticate=*/true, core_, "GetModel",
                   [&] { return core_->GetModel(*request, response); });
}

}  // namespace odeserve::rpc
