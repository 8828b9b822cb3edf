#include "server/metrics/metrics.h"

#include <sstream>

#include <prometheus/text_serializer.h>

#include "absl/strings/str_cat.h"

namespace odeserve::metrics {
namespace {

using prometheus::Histogram;

// Latency buckets from 0.5 ms to 10 s: budgets of interest lie between 1 ms and a few seconds.
const Histogram::BucketBoundaries& LatencyBuckets() {
  static const Histogram::BucketBoundaries buckets = {
      0.0005, 0.001, 0.002, 0.003, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.03, 0.05, 0.075,
      0.1,    0.15,  0.2,   0.3,   0.5,   0.75,   1.0,  2.0,   5.0,  10.0};
  return buckets;
}

const Histogram::BucketBoundaries& StepBuckets() {
  static const Histogram::BucketBoundaries buckets = {1, 2, 3, 4, 5, 6, 8, 10, 12, 16, 24, 32, 48, 64};
  return buckets;
}

const Histogram::BucketBoundaries& BatchSizeBuckets() {
  static const Histogram::BucketBoundaries buckets = {1, 2, 4, 8, 16, 32, 64, 128};
  return buckets;
}

const Histogram::BucketBoundaries& TokenBuckets() {
  static const Histogram::BucketBoundaries buckets = {16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384};
  return buckets;
}

const Histogram::BucketBoundaries& ErrorBuckets() {
  static const Histogram::BucketBoundaries buckets = {0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.5, 1.0, 2.0};
  return buckets;
}

}  // namespace

void ModelMetrics::OnQueueDepth(int queued_rows) { queue_depth_->Set(queued_rows); }

void ModelMetrics::OnBatch(const scheduler::BatchObservation& batch) {
  batch_size_->Observe(batch.rows);
  batch_tokens_->Observe(static_cast<double>(batch.padded_tokens));
  joined_rows_->Increment(batch.joined_rows);
  cost_error_->Observe(batch.relative_error);
}

void ModelMetrics::ObserveCall(double queue_seconds, double compute_seconds, int steps,
                               int input_tokens) {
  queue_duration_->Observe(queue_seconds);
  compute_duration_->Observe(compute_seconds);
  steps_->Observe(steps);
  input_tokens_->Increment(input_tokens);
}

void ModelMetrics::ObserveDecode(int decoder_steps, int output_tokens) {
  decoder_steps_->Observe(decoder_steps);
  output_tokens_->Increment(output_tokens);
}

void ModelMetrics::ObserveBudget(const std::string& outcome) {
  if (outcome == "met") budget_met_->Increment();
  else if (outcome == "missed") budget_missed_->Increment();
  else budget_refused_->Increment();
}

Metrics::Metrics(const BuildInfo& build)
    : registry_(std::make_shared<prometheus::Registry>()),
      requests_(prometheus::BuildCounter().Name("odeserve_requests_total")
                    .Help("Finished RPCs by model, method and gRPC status code.").Register(*registry_)),
      request_duration_(prometheus::BuildHistogram().Name("odeserve_request_duration_seconds")
                            .Help("Time from receiving an RPC to its response, by model and method.")
                            .Register(*registry_)),
      queue_duration_(prometheus::BuildHistogram().Name("odeserve_queue_duration_seconds")
                          .Help("Time a call waited in its model's queue before its batch started.")
                          .Register(*registry_)),
      compute_duration_(prometheus::BuildHistogram().Name("odeserve_compute_duration_seconds")
                            .Help("Time from a call's batch start to its rows finishing.")
                            .Register(*registry_)),
      steps_(prometheus::BuildHistogram().Name("odeserve_solver_steps")
                 .Help("ODE solver steps run through the shared block per call.").Register(*registry_)),
      budget_(prometheus::BuildCounter().Name("odeserve_budget_requests_total")
                  .Help("Calls with a latency budget by outcome: met, missed (late, or expired before finishing), refused.").Register(*registry_)),
      batch_size_(prometheus::BuildHistogram().Name("odeserve_batch_size")
                      .Help("Rows (inputs) per executed batch.").Register(*registry_)),
      batch_tokens_(prometheus::BuildHistogram().Name("odeserve_batch_tokens")
                        .Help("Padded tokens per executed batch.").Register(*registry_)),
      joined_rows_(prometheus::BuildCounter().Name("odeserve_joined_rows_total")
                       .Help("Rows (inputs) that joined a running batch at a step boundary.")
                       .Register(*registry_)),
      queue_depth_(prometheus::BuildGauge().Name("odeserve_queue_depth")
                       .Help("Inputs waiting in the model's queue.").Register(*registry_)),
      in_flight_(prometheus::BuildGauge().Name("odeserve_requests_in_flight")
                     .Help("Calls accepted and not yet answered.").Register(*registry_)),
      cost_error_(prometheus::BuildHistogram().Name("odeserve_cost_model_relative_error")
                      .Help("|predicted - measured| / measured batch compute time.").Register(*registry_)),
      input_tokens_(prometheus::BuildCounter().Name("odeserve_input_tokens_total")
                        .Help("Tokens of served inputs after truncation.").Register(*registry_)),
      decoder_steps_(prometheus::BuildHistogram().Name("odeserve_decoder_steps")
                         .Help("Translation: decoder ODE steps per generated position, per call.").Register(*registry_)),
      output_tokens_(prometheus::BuildCounter().Name("odeserve_output_tokens_total")
                         .Help("Translation: tokens generated (EOS not counted).").Register(*registry_)),
      model_info_(prometheus::BuildGauge().Name("odeserve_model_info")
                      .Help("Loaded models (value 1).").Register(*registry_)),
      model_load_seconds_(prometheus::BuildGauge().Name("odeserve_model_load_seconds")
                              .Help("Time taken to load, prepare and calibrate the model.").Register(*registry_)),
      build_info_(prometheus::BuildGauge().Name("odeserve_build_info")
                      .Help("Build of the running server (value 1).").Register(*registry_)) {
  build_info_.Add({{"version", build.version}, {"commit", build.commit}, {"libtorch", build.libtorch}}).Set(1);
}

absl::Status Metrics::StartExposer(const std::string& host, int port) {
  exposer_ = std::make_unique<HttpExposer>([this] { return Render(); });
  return exposer_->Start(host, port);
}

int Metrics::exposer_port() const { return exposer_ ? exposer_->port() : 0; }

ModelMetrics* Metrics::AddModel(const std::string& model, const std::string& version,
                                const std::string& task, const std::string& family,
                                const std::string& device, double load_seconds) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto& slot = models_[model];
  if (slot) return slot.get();
  slot = std::make_unique<ModelMetrics>();
  ModelMetrics& m = *slot;
  const prometheus::Labels labels{{"model", model}};
  m.queue_duration_ = &queue_duration_.Add(labels, LatencyBuckets());
  m.compute_duration_ = &compute_duration_.Add(labels, LatencyBuckets());
  m.steps_ = &steps_.Add(labels, StepBuckets());
  m.batch_size_ = &batch_size_.Add(labels, BatchSizeBuckets());
  m.batch_tokens_ = &batch_tokens_.Add(labels, TokenBuckets());
  m.joined_rows_ = &joined_rows_.Add(labels);
  m.cost_error_ = &cost_error_.Add(labels, ErrorBuckets());
  m.queue_depth_ = &queue_depth_.Add(labels);
  m.in_flight_ = &in_flight_.Add(labels);
  m.input_tokens_ = &input_tokens_.Add(labels);
  m.decoder_steps_ = &decoder_steps_.Add(labels, StepBuckets());
  m.output_tokens_ = &output_tokens_.Add(labels);
  m.budget_met_ = &budget_.Add({{"model", model}, {"outcome", "met"}});
  m.budget_missed_ = &budget_.Add({{"model", model}, {"outcome", "missed"}});
  m.budget_refused_ = &budget_.Add({{"model", model}, {"outcome", "refused"}});
  model_info_.Add({{"model", model}, {"version", version}, {"task", task}, {"family", family}, {"device", device}}).Set(1);
  model_load_seconds_.Add(labels).Set(load_seconds);
  return slot.get();
}

void Metrics::RecordRequest(const std::string& model, const std::string& method,
                            const std::string& code, double seconds) {
  prometheus::Counter* counter;
  prometheus::Histogram* histogram;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto& c = request_counters_[{model, method, code}];
    if (c == nullptr) c = &requests_.Add({{"model", model}, {"method", method}, {"code", code}});
    auto& h = request_histograms_[{model, method}];
    if (h == nullptr) h = &request_duration_.Add({{"model", model}, {"method", method}}, LatencyBuckets());
    counter = c;
    histogram = h;
  }
  counter->Increment();
  histogram->Observe(seconds);
}

std::string Metrics::Render() const {
  std::ostringstream out;
  prometheus::TextSerializer().Serialize(out, registry_->Collect());
  return out.str();
}

}  // namespace odeserve::metrics
