#pragma once
// The request pipeline behind the RPCs, free of gRPC types: validate, tokenize, choose steps,
// queue, and build the response. Every outcome is an absl::Status; the rpc layer maps it once.

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "odeserve/v1/inference.pb.h"
#include "server/common/task_pool.h"
#include "server/core/model_manager.h"
#include "server/metrics/metrics.h"

namespace odeserve::core {

/// What the transport knows about a call.
struct CallContext {
  absl::Time received = absl::Now();
  absl::Time deadline = absl::InfiniteFuture();  // the client's deadline, if it set one
  std::function<bool()> cancelled;               // optional; true once the client gave up
  // The RPC the metrics count the call under; empty = the core method's own name (Embed, ...).
  // The Open Inference service serves ModelInfer through Embed, Classify and Translate.
  std::string method;
};

/// Called exactly once per call, possibly on another thread, after the response is filled.
using Completion = std::function<void(absl::Status)>;
/// Receives the messages of a streaming call, in order, on the model's batcher thread.
using StreamWriter = std::function<void(v1::TranslateStreamResponse)>;

/// Server-wide settings of the request pipeline.
struct InferenceOptions {
  /// The part of every latency budget kept for time the server cannot see: the request's and the
  /// response's way through the network, gRPC and the client. A budget is measured by the
  /// client, so a plan that spends all of it server-side is late there.
  absl::Duration budget_reserve = absl::ZeroDuration();
  /// The most bytes of one input any model reads (--max_text_bytes); each model's own limit is
  /// kTextBytesPerToken x its max_sequence_length, within this (server/core/input_limits.h).
  int64_t max_text_bytes = 65536;
  /// The most token field evaluations one call may cost (--max_call_work; server/core/work_limit.h).
  int64_t max_call_work = 1000000;
  /// Threads that tokenize and plan calls (--tokenization_threads; >= 1), off gRPC's threads.
  int tokenization_threads = 2;
  /// Calls that may wait for a tokenization thread; one more is refused with
  /// RESOURCE_EXHAUSTED (--max_tokenization_queue).
  size_t max_tokenization_queue = 4096;
  /// Threads that fill responses, record metrics and answer finished calls (--completion_threads);
  /// 0 = the model's batcher thread does it between steps.
  int completion_threads = 1;
};

class InferenceCore {
 public:
  InferenceCore(ModelManager* models, metrics::Metrics* metrics, InferenceOptions options = {});

  void Embed(const CallContext& call, const v1::EmbedRequest& request, v1::EmbedResponse* response,
             Completion done);
  void Classify(const CallContext& call, const v1::ClassifyRequest& request,
                v1::ClassifyResponse* response, Completion done);
  void Translate(const CallContext& call, const v1::TranslateRequest& request,
                 v1::TranslateResponse* response, Completion done);
  /// Translate, streamed: `write` gets each greedy row's text after every generated token, then
  /// every input's final text, the last message with the report; then `done` is called.
  void TranslateStream(const CallContext& call, const v1::TranslateRequest& request, StreamWriter write,
                       Completion done);
  absl::Status ListModels(const v1::ListModelsRequest& request, v1::ListModelsResponse* response);
  absl::Status GetModel(const v1::GetModelRequest& request, v1::GetModelResponse* response);

  /// Until this is called every call fails with UNAVAILABLE (models are still loading).
  void SetReady() { ready_.store(true, std::memory_order_release); }
  /// From now on new calls fail with UNAVAILABLE; calls already accepted finish.
  void StartDraining() { draining_.store(true); }
  bool draining() const { return draining_.load(); }
  int in_flight() const { return in_flight_.load(); }
  /// Counts a call that never reached a model in the request metrics, with no model label:
  /// a refusal before admission (authentication, loading, draining: the name in such a request
  /// is not trusted, and `took` is zero) or a finished ListModels/GetModel call.
  void RecordServerCall(const std::string& method, const absl::Status& status,
                        absl::Duration took = absl::ZeroDuration());

 private:
  /// Translation-only request fields (beam_size 0 = greedy, max_output_tokens 0 = default).
  struct DecodeRequest {
    int beam_size = 0;
    int max_output_tokens = 0;
    float length_penalty = 0;  // 0 = the model's
    /// Optional: a greedy row's text so far, after each generated token (streaming).
    std::function<void(size_t row, std::string text)> on_text;
  };
  /// One model call as RunModel takes it. `inputs`, `compute` and `report` belong to the request
  /// and the response, which live until the call's completion.
  struct ModelCall {
    v1::Task task = v1::TASK_UNSPECIFIED;  // the task the RPC serves
    std::string method;                    // the RPC it is counted under
    std::string model;
    const google::protobuf::RepeatedPtrField<std::string>* inputs = nullptr;
    const v1::ComputeOptions* compute = nullptr;
    bool truncate = false;
    std::optional<DecodeRequest> decode;  // Translate only
    /// Builds the response from the finished work.
    std::function<void(const Servable&, scheduler::WorkResult&)> fill;
    v1::ComputeReport* report = nullptr;
  };
  /// A validated call on its way to a tokenization thread.
  struct PendingCall {
    CallContext call;
    const Servable* servable = nullptr;
    ModelCall request;
    Completion done;  // tracked
  };
  /// The pipeline shared by every model RPC: admission and validation here, then tokenization,
  /// step choice and queueing on a tokenization thread (Prepare).
  void RunModel(const CallContext& call, ModelCall request, Completion done);
  /// Bounds the bytes, tokenizes, chooses the steps and queues the call (a tokenization thread).
  void Prepare(PendingCall pending);
  void RunTranslate(const CallContext& call, const std::string& method, const v1::TranslateRequest& request,
                    const DecodeRequest& decode, v1::TranslateResponse* response, Completion done);
  /// Wraps `done` so that the call is counted in metrics and in-flight exactly once.
  Completion Track(const std::string& model, const std::string& method, absl::Time received,
                   Completion done);

  ModelManager* const models_;
  metrics::Metrics* const metrics_;
  const InferenceOptions options_;
  /// OK when calls may be served; UNAVAILABLE while starting or draining.
  absl::Status Admission() const;
  /// Admission() for an inference call, counted in the request metrics when it refuses.
  absl::Status Admit(const std::string& method);

  std::atomic<bool> ready_{false};
  std::atomic<bool> draining_{false};
  std::atomic<int> in_flight_{0};
  // Destroyed after the tokenization pool, whose calls may still complete here. Null: calls
  // complete on their batcher thread.
  std::unique_ptr<TaskPool> completion_;
  // Last: destroyed first, after running the calls it still holds (they use the members above).
  std::unique_ptr<TaskPool> tokenization_;
};

}  // namespace odeserve::core
