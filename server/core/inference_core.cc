#include "server/core/inference_core.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "google/protobuf/util/time_util.h"
#include "server/common/status_macros.h"
#include "server/core/input_limits.h"
#include "server/core/request_validation.h"
#include "server/core/work_limit.h"
#include "server/repository/model_config.h"
#include "server/tokenizer/ngram_hash.h"

namespace odeserve::core {
namespace {

// Completions waiting for a completion thread; past it a batcher completes calls itself. Every
// waiting completion is a call already computed, so this only bounds the queue's memory.
constexpr size_t kMaxWaitingCompletions = 65536;

using google::protobuf::util::TimeUtil;

google::protobuf::Duration ToProto(absl::Duration d) {
  return TimeUtil::NanosecondsToDuration(absl::ToInt64Nanoseconds(d));
}

absl::Duration FromProto(const google::protobuf::Duration& d) {
  return absl::Seconds(d.seconds()) + absl::Nanoseconds(d.nanos());
}

// The RPC a call is counted under: the caller's, or this core method's own.
std::string MethodName(const CallContext& call, const char* own) { return call.method.empty() ? own : call.method; }


// Finds a READY model serving `task`, or the status the caller gets.
absl::StatusOr<const Servable*> FindServable(const ModelManager& models, const std::string& name,
                                             v1::Task task, const std::string& method) {
  if (name.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("model is empty; loaded models: ",
                                                   absl::StrJoin(models.ReadyModelNames(), ", ")));
  }
  const ModelEntry* entry = models.Find(name);
  if (entry == nullptr) {
    return absl::NotFoundError(absl::StrCat("model '", name, "' not found; loaded models: ",
                                            absl::StrJoin(models.ReadyModelNames(), ", ")));
  }
  if (entry->state != v1::READY) {
    return absl::FailedPreconditionError(
        absl::StrCat("model '", name, "' is not serving: it failed to load: ", entry->error));
  }
  RETURN_IF_ERROR(CheckTask(entry->servable->config, task, method));
  return entry->servable.get();
}

// Whether the client gave up on the call (cancelled, or its deadline passed): the status to
// end it with, or OK.
absl::Status CallGone(const CallContext& call) {
  if (absl::Now() >= call.deadline) {
    return absl::DeadlineExceededError("deadline passed before the call was queued");
  }
  if (call.cancelled && call.cancelled()) {
    return absl::CancelledError("call cancelled by the client before it was queued");
  }
  return absl::OkStatus();
}

// `texts` are the inputs within their byte limit (BoundInputBytes); a text cut there counts as
// truncated whatever its token count.
absl::StatusOr<std::vector<tokenizer::EncodedText>> Tokenize(const Servable& s, const CallContext& call,
                                                             const std::vector<BoundedText>& texts,
                                                             bool truncate) {
  std::vector<tokenizer::EncodedText> rows;
  rows.reserve(texts.size());
  const int limit = s.config.max_sequence_length();
  for (size_t i = 0; i < texts.size(); ++i) {
    // A call given up (while it waited for this thread, or meanwhile) stops here.
    RETURN_IF_ERROR(CallGone(call));
    auto encoded = s.tokenizer->Encode(texts[i].text, limit, truncate);
    if (absl::IsOutOfRange(encoded.status())) {
      return absl::InvalidArgumentError(absl::StrCat("inputs[", i, "] has ", encoded.status().message(), "; model '",
                                                     s.config.name(), "' accepts at most ", limit,
                                                     " (max_sequence_length); shorten it or set truncate=true"));
    }
    if (!encoded.ok()) return absl::InvalidArgumentError(absl::StrCat("inputs[", i, "]: ", encoded.status().message()));
    // Possible for a model without bos/eos (whitespace only): a row of no tokens has nothing to
    // attend over.
    if (encoded->ids.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("inputs[", i, "] has no tokens after tokenization for model '",
                                                     s.config.name(), "'"));
    }
    if (texts[i].cut) encoded->truncated = true;
    rows.push_back(*std::move(encoded));
  }
  return rows;
}

void L2Normalize(std::vector<float>& v) {
  double norm = 0;
  for (float x : v) norm += double(x) * x;
  norm = std::sqrt(norm);
  if (norm > 0) for (float& x : v) x = static_cast<float>(x / norm);
}

std::vector<std::pair<float, int>> TopKSoftmax(const std::vector<float>& logits, int k) {
  const float top = *std::max_element(logits.begin(), logits.end());
  std::vector<std::pair<float, int>> scored;
  double total = 0;
  for (size_t i = 0; i < logits.size(); ++i) {
    const double e = std::exp(double(logits[i]) - top);
    total += e;
    scored.emplace_back(static_cast<float>(e), static_cast<int>(i));
  }
  for (auto& [score, index] : scored) score = static_cast<float>(score / total);
  k = std::min<int>(k, scored.size());
  std::partial_sort(scored.begin(), scored.begin() + k, scored.end(),
                    [](const auto& a, const auto& b) { return a.first > b.first; });
  scored.resize(k);
  return scored;
}

v1::StepChoice ToProto(scheduler::StepChoiceKind kind) {
  switch (kind) {
    case scheduler::StepChoiceKind::kRequested: return v1::REQUESTED;
    case scheduler::StepChoiceKind::kModelDefault: return v1::MODEL_DEFAULT;
    case scheduler::StepChoiceKind::kBudget: return v1::BUDGET;
    case scheduler::StepChoiceKind::kBudgetFloor: return v1::BUDGET_FLOOR;
  }
  return v1::STEP_CHOICE_UNSPECIFIED;
}

}  // namespace

InferenceCore::InferenceCore(ModelManager* models, metrics::Metrics* metrics, InferenceOptions options)
    : models_(models),
      metrics_(metrics),
      options_(options),
      completion_(options.completion_threads > 0
                      ? std::make_unique<TaskPool>(TaskPoolOptions{"odeserve-answer", options.completion_threads,
                                                                   kMaxWaitingCompletions})
                      : nullptr),
      tokenization_(std::make_unique<TaskPool>(
          TaskPoolOptions{"odeserve-tokens", options.tokenization_threads, options.max_tokenization_queue})) {}

absl::Status InferenceCore::Admission() const {
  if (!ready_.load(std::memory_order_acquire)) {
    return absl::UnavailableError("server is starting: models are still loading; retry shortly");
  }
  if (draining()) return absl::UnavailableError("server is shutting down; retry on another replica");
  return absl::OkStatus();
}

absl::Status InferenceCore::Admit(const std::string& method) {
  absl::Status status = Admission();
  // Before SetReady the model map may still be filling: no model label (nor lookup) here.
  if (!status.ok()) RecordServerCall(method, status);
  return status;
}

void InferenceCore::RecordServerCall(const std::string& method, const absl::Status& status,
                                     absl::Duration took) {
  metrics_->RecordRequest("", method, absl::StatusCodeToString(status.code()), absl::ToDoubleSeconds(took));
}

Completion InferenceCore::Track(const std::string& model, const std::string& method,
                                absl::Time received, Completion done) {
  // Unknown model names are not used as metric labels (unbounded cardinality).
  const ModelEntry* entry = models_->Find(model);
  const std::string label = entry != nullptr ? model : "";
  metrics::ModelMetrics* model_metrics = entry && entry->servable ? entry->servable->metrics : nullptr;
  in_flight_.fetch_add(1);
  if (model_metrics) model_metrics->in_flight().Increment();
  return [this, label, method, received, model_metrics, done = std::move(done)](absl::Status status) {
    metrics_->RecordRequest(label, method, absl::StatusCodeToString(status.code()),
                            absl::ToDoubleSeconds(absl::Now() - received));
    if (model_metrics) model_metrics->in_flight().Decrement();
    in_flight_.fetch_sub(1);
    done(std::move(status));
  };
}

void InferenceCore::RunModel(const CallContext& call, ModelCall request, Completion done_untracked) {
  const std::string& method = request.method;
  if (auto admission = Admit(method); !admission.ok()) return done_untracked(admission);
  Completion done = Track(request.model, method, call.received, std::move(done_untracked));
  auto servable_or = FindServable(*models_, request.model, request.task, method);
  if (!servable_or.ok()) return done(servable_or.status());
  const Servable& s = **servable_or;
  if (auto status = ValidateInputs(s.config, *request.inputs); !status.ok()) return done(status);
  if (auto status = ValidateCompute(s.config, *request.compute); !status.ok()) return done(status);
  if (const auto& decode = request.decode) {
    const DecodeOptions options{decode->beam_size, decode->max_output_tokens, decode->length_penalty};
    if (auto status = ValidateDecode(s.config, *request.compute, options); !status.ok()) return done(status);
  }
  PendingCall pending{call, &s, std::move(request), done};
  // Tokenizing costs more than a text's length (a run of unknown characters costs its square):
  // it runs on the server's own threads, never on gRPC's, which also answer health checks.
  auto posted = tokenization_->Post([this, pending = std::move(pending)]() mutable { Prepare(std::move(pending)); });
  if (!posted.ok()) {
    done(absl::ResourceExhaustedError(absl::StrCat(
        "server busy: ", tokenization_->max_waiting(),
        " calls already wait to be tokenized (--max_tokenization_queue); retry with backoff")));
  }
}

void InferenceCore::Prepare(PendingCall pending) {
  const CallContext& call = pending.call;
  const Servable& s = *pending.servable;
  ModelCall& request = pending.request;
  const v1::ComputeOptions& compute = *request.compute;
  const bool truncate = request.truncate;
  const DecodeRequest* decode = request.decode ? &*request.decode : nullptr;
  v1::ComputeReport* report = request.report;
  Completion& done = pending.done;
  const std::string& model = s.config.name();
  // Bytes are bounded before any tokenization (its cost grows faster than a text's length).
  auto texts_or = BoundInputBytes(*request.inputs, s.config.name(), s.config.max_sequence_length(),
                                  options_.max_text_bytes, truncate);
  if (!texts_or.ok()) return done(texts_or.status());
  auto rows_or = Tokenize(s, call, *texts_or, truncate);
  if (!rows_or.ok()) return done(rows_or.status());

  // The budget is the explicit latency_budget, else the client's deadline, and never past the
  // deadline (the call is dropped there: a plan that counted on later time would spend compute
  // on an answer nobody receives). Time already spent in the server counts against it, and the
  // plan leaves the reserve for the time outside the server.
  std::optional<absl::Duration> budget;
  if (compute.has_latency_budget()) budget = FromProto(compute.latency_budget());
  if (call.deadline != absl::InfiniteFuture()) {
    budget = std::min(budget.value_or(absl::InfiniteDuration()), call.deadline - call.received);
  }
  scheduler::PlanRequest plan_request;
  plan_request.rows = static_cast<int>(rows_or->size());
  size_t longest = 0;
  int tokens = 0, truncated = 0;
  for (const auto& row : *rows_or) {
    longest = std::max(longest, row.ids.size());
    tokens += static_cast<int>(row.ids.size());
    truncated += row.truncated ? 1 : 0;
  }
  plan_request.padded_tokens = static_cast<int64_t>(longest) * plan_request.rows;
  plan_request.steps = compute.steps();
  if (compute.solver() != v1::SOLVER_UNSPECIFIED) plan_request.solver = ToSchedulerSolver(compute.solver());
  const absl::Time planned = absl::Now();
  const absl::Duration spent = planned - call.received;
  if (budget) plan_request.budget = *budget - spent - options_.budget_reserve;
  plan_request.min_steps = compute.min_steps();
  plan_request.miss_policy = compute.on_budget_miss() == v1::REFUSE ? scheduler::MissPolicy::kRefuse
                                                                     : scheduler::MissPolicy::kServeFloor;
  scheduler::DecodeSpec decode_spec;
  int max_output = 0;
  if (decode != nullptr) {
    const auto& t = s.config.translation();
    decode_spec.beam_size = std::max(1, decode->beam_size);
    decode_spec.max_output_tokens = decode->max_output_tokens;
    decode_spec.length_penalty =
        static_cast<float>(decode->length_penalty > 0 ? decode->length_penalty : t.length_penalty());
    // The decoder runs until the longest row stops: expect its measured output length.
    const int longest_source = static_cast<int>(longest);
    max_output = decode->max_output_tokens > 0
                     ? decode->max_output_tokens
                     : scheduler::DefaultMaxOutputTokens(longest_source, t.max_output_tokens());
    plan_request.decoder_steps = compute.decoder_steps();
    plan_request.beam_size = decode_spec.beam_size;
    plan_request.expected_output_tokens = std::clamp(
        static_cast<int>(std::ceil(t.expected_output_ratio() * std::max(1, longest_source - 2))) + 1, 1, max_output);
  }
  auto plan_or = s.scheduler->MakePlan(plan_request);
  if (!plan_or.ok()) {
    if (!absl::IsDeadlineExceeded(plan_or.status())) return done(plan_or.status());
    s.metrics->ObserveBudget("refused");
    if (options_.budget_reserve <= absl::ZeroDuration()) return done(plan_or.status());
    return done(absl::DeadlineExceededError(absl::StrCat(
        plan_or.status().message(), "; the server planned within the budget less its --budget_reserve of ",
        absl::FormatDuration(options_.budget_reserve), ", kept for the time outside the server")));
  }
  const scheduler::Plan plan = *plan_or;
  CallShape shape;
  shape.tokens = tokens;
  shape.encoder_field_evaluations = plan.steps * scheduler::EvaluationsPerStep(plan.solver);
  if (decode != nullptr) {
    shape.hypotheses = int64_t{plan_request.rows} * decode_spec.beam_size;
    shape.max_output_tokens = max_output;
    shape.decoder_field_evaluations = plan.decoder_steps;  // the decoder integrates with Euler
  }
  if (auto status = CheckCallWork(shape, options_.max_call_work, model); !status.ok()) return done(status);

  if (decode != nullptr) {
    decode_spec.decoder_steps = plan.decoder_steps;
    report->set_decoder_steps(plan.decoder_steps);
    report->set_decoder_step_size(
        static_cast<float>(double(s.config.translation().decoder_trained_depth()) / plan.decoder_steps));
    report->set_beam_size(decode_spec.beam_size);
  }
  report->set_steps(plan.steps);
  report->set_solver(ToProtoSolver(plan.solver));
  report->set_step_size(static_cast<float>(double(s.config.trained_depth()) / plan.steps));
  report->set_field_evaluations(plan.steps * scheduler::EvaluationsPerStep(plan.solver));
  report->set_step_choice(ToProto(plan.choice));
  report->set_device(s.device);
  report->set_tokens(tokens);
  report->set_truncated_inputs(truncated);
  *report->mutable_predicted_time() = ToProto(spent + plan.predicted_total);
  report->set_budget_set(budget.has_value());
  if (budget) *report->mutable_budget() = ToProto(*budget);

  auto item = std::make_unique<scheduler::WorkItem>();
  item->rows = *std::move(rows_or);
  item->steps = plan.steps;
  item->solver = plan.solver;
  item->decode = decode_spec;
  item->expected_output_tokens = plan_request.expected_output_tokens;
  item->deadline = call.deadline;
  if (budget) item->latest_start = planned + plan.start_within;
  item->cancelled = call.cancelled;
  if (decode != nullptr && decode->on_text) {
    item->progress = [tokenizer = s.tokenizer.get(), on_text = decode->on_text](size_t row,
                                                                            absl::Span<const int32_t> tokens) {
      on_text(row, tokenizer->Decode(std::vector<int>(tokens.begin(), tokens.end())));
    };
  }
  const absl::Time received = call.received;
  const Servable* servable = &s;
  const absl::Duration predicted = spent + plan.predicted_total;
  auto finish = [servable, report, received, budget, tokens, predicted, fill = std::move(request.fill),
                 done, cancelled = call.cancelled,
                 deadline = call.deadline](absl::StatusOr<scheduler::WorkResult> result) mutable {
    // A client that gave up after the batcher's last check (a completion thread may answer a
    // little later) never receives the result: it counts as cancelled, not served.
    if (result.ok() && cancelled && absl::Now() < deadline && cancelled()) {
      result = absl::CancelledError("call cancelled by the client before it was answered; its result was dropped");
    }
    if (!result.ok()) {
      // Expired in the queue or mid-compute: the worst kind of miss (a cancelled call is the
      // client's choice, not a budget outcome).
      if (budget && absl::IsDeadlineExceeded(result.status())) servable->metrics->ObserveBudget("missed");
      return done(result.status());
    }
    fill(*servable, *result);
    const absl::Duration total = absl::Now() - received;
    *report->mutable_queue_time() = ToProto(result->queue_time);
    *report->mutable_compute_time() = ToProto(result->compute_time);
    *report->mutable_total_time() = ToProto(total);
    report->set_batch_size(result->batch_rows);
    const bool met = !budget.has_value() || total <= *budget;
    report->set_budget_met(met);
    servable->scheduler->ObserveCallLatency(predicted, total);
    servable->metrics->ObserveCall(absl::ToDoubleSeconds(result->queue_time),
                                   absl::ToDoubleSeconds(result->compute_time), report->steps(), tokens);
    if (budget) servable->metrics->ObserveBudget(met ? "met" : "missed");
    done(absl::OkStatus());
  };
  if (completion_ == nullptr) {
    item->done = std::move(finish);
  } else {
    // While the batcher has more to do (rows still computing, calls queued), the response, the
    // metrics and the answer are made on a completion thread, so that they never wait for them.
    // Otherwise the batcher answers at once: the hand-off costs a lone call about 0.2 ms.
    item->done = [pool = completion_.get(), finish](absl::StatusOr<scheduler::WorkResult> result) mutable {
      if (!result.ok() || !result->others_wait) return finish(std::move(result));
      auto shared = std::make_shared<absl::StatusOr<scheduler::WorkResult>>(std::move(result));
      std::function<void()> task = [finish, shared]() mutable { finish(std::move(*shared)); };
      if (!pool->Post(task).ok()) task();  // a full queue answers here rather than never
    };
  }
  // Tokenizing and planning took time: a call given up meanwhile is not queued.
  if (auto gone = CallGone(call); !gone.ok()) return done(gone);
  if (auto status = s.scheduler->Submit(std::move(item)); !status.ok()) done(status);
}

void InferenceCore::Embed(const CallContext& call, const v1::EmbedRequest& request,
                          v1::EmbedResponse* response, Completion done) {
  response->set_model(request.model());
  const bool normalize = request.normalize();
  auto fill = [response, normalize](const Servable&, scheduler::WorkResult& result) {
    for (auto& output : result.outputs) {
      if (normalize) L2Normalize(output);
      response->add_embeddings()->mutable_values()->Add(output.begin(), output.end());
    }
  };
  RunModel(call,
           {v1::EMBEDDING, MethodName(call, "Embed"), request.model(), &request.inputs(), &request.compute(),
            request.truncate(), std::nullopt, std::move(fill), response->mutable_report()},
           std::move(done));
}

void InferenceCore::Classify(const CallContext& call, const v1::ClassifyRequest& request,
                             v1::ClassifyResponse* response, Completion done) {
  response->set_model(request.model());
  const std::string method = MethodName(call, "Classify");
  if (auto admission = Admit(method); !admission.ok()) return done(admission);
  if (auto status = ValidateTopK(request.top_k()); !status.ok()) {
    Track(request.model(), method, call.received, std::move(done))(status);
    return;
  }
  const int top_k = std::max(1, request.top_k());
  auto fill = [response, top_k](const Servable& s, scheduler::WorkResult& result) {
    for (const auto& logits : result.outputs) {
      auto* result = response->add_results();
      for (const auto& [score, index] : TopKSoftmax(logits, top_k)) {
        auto* label = result->add_labels();
        label->set_label(s.config.labels(index));
        label->set_score(score);
      }
    }
  };
  RunModel(call,
           {v1::CLASSIFICATION, method, request.model(), &request.inputs(), &request.compute(), request.truncate(),
            std::nullopt, std::move(fill), response->mutable_report()},
           std::move(done));
}

void InferenceCore::Translate(const CallContext& call, const v1::TranslateRequest& request,
                              v1::TranslateResponse* response, Completion done) {
  const DecodeRequest decode{request.beam_size(), request.max_output_tokens(), request.length_penalty(), nullptr};
  RunTranslate(call, MethodName(call, "Translate"), request, decode, response, std::move(done));
}

void InferenceCore::RunTranslate(const CallContext& call, const std::string& method,
                                 const v1::TranslateRequest& request, const DecodeRequest& decode,
                                 v1::TranslateResponse* response, Completion done) {
  response->set_model(request.model());
  auto fill = [response](const Servable& s, scheduler::WorkResult& result) {
    int output_tokens = 0;
    for (size_t i = 0; i < result.tokens.size(); ++i) {
      const std::vector<int> ids(result.tokens[i].begin(), result.tokens[i].end());
      output_tokens += static_cast<int>(ids.size());
      response->add_translations(s.tokenizer->Decode(ids));
      response->add_scores(result.scores[i]);
    }
    response->mutable_report()->set_output_tokens(output_tokens);
    s.metrics->ObserveDecode(response->report().decoder_steps(), output_tokens);
  };
  RunModel(call,
           {v1::TRANSLATION, method, request.model(), &request.inputs(), &request.compute(), request.truncate(),
            decode, std::move(fill), response->mutable_report()},
           std::move(done));
}

void InferenceCore::TranslateStream(const CallContext& call, const v1::TranslateRequest& request,
                                    StreamWriter write, Completion done) {
  // The unary pipeline fills a whole response; the stream sends partial texts as they come and
  // turns that response into the final messages.
  auto response = std::make_shared<v1::TranslateResponse>();
  DecodeRequest decode{request.beam_size(), request.max_output_tokens(), request.length_penalty(), nullptr};
  decode.on_text = [write](size_t row, std::string text) {
    v1::TranslateStreamResponse message;
    message.set_index(static_cast<int>(row));
    message.set_text(std::move(text));
    write(std::move(message));
  };
  RunTranslate(call, "TranslateStream", request, decode, response.get(),
               [response, write, done = std::move(done)](absl::Status status) {
                 if (status.ok()) {
                   for (int i = 0; i < response->translations_size(); ++i) {
                     v1::TranslateStreamResponse message;
                     message.set_index(i);
                     message.set_text(response->translations(i));
                     message.set_final(true);
                     message.set_score(response->scores(i));
                     if (i + 1 == response->translations_size()) *message.mutable_report() = response->report();
                     write(std::move(message));
                   }
                 }
                 done(std::move(status));
               });
}

absl::Status InferenceCore::ListModels(const v1::ListModelsRequest&, v1::ListModelsResponse* response) {
  RETURN_IF_ERROR(Admission());
  for (const ModelEntry* entry : models_->List()) *response->add_models() = ModelManager::Describe(*entry);
  return absl::OkStatus();
}

absl::Status InferenceCore::GetModel(const v1::GetModelRequest& request, v1::GetModelResponse* response) {
  RETURN_IF_ERROR(Admission());
  if (request.name().empty()) return absl::InvalidArgumentError("name is empty");
  const ModelEntry* entry = models_->Find(request.name());
  if (entry == nullptr) {
    return absl::NotFoundError(absl::StrCat("model '", request.name(), "' not found; loaded models: ",
                                            absl::StrJoin(models_->ReadyModelNames(), ", ")));
  }
  *response->mutable_model() = ModelManager::Describe(*entry);
  return absl::OkStatus();
}

}  // namespace odeserve::core
