#pragma once
// Prometheus metrics of the server. Every family is registered once in the constructor and
// every per-model child once when the model loads, so the request path only increments.

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include "absl/status/statusor.h"
#include "server/metrics/http_exposer.h"
#include "server/scheduler/model_scheduler.h"

namespace odeserve::metrics {

class Metrics;

/// Per-model children; also the scheduler's observer for queue and batch events.
class ModelMetrics : public scheduler::SchedulerObserver {
 public:
  void OnQueueDepth(int queued_rows) override;
  void OnBatch(const scheduler::BatchObservation& batch) override;

  /// One finished call's scheduler timings and choice.
  void ObserveCall(double queue_seconds, double compute_seconds, int steps, int input_tokens);
  /// Translation: the decoder steps a call ran and the tokens it generated.
  void ObserveDecode(int decoder_steps, int output_tokens);
  /// Budget outcome: "met", "missed" or "refused".
  void ObserveBudget(const std::string& outcome);
  prometheus::Gauge& in_flight() { return *in_flight_; }

 private:
  friend class Metrics;
  prometheus::Histogram* queue_duration_ = nullptr;
  prometheus::Histogram* compute_duration_ = nullptr;
  prometheus::Histogram* steps_ = nullptr;
  prometheus::Histogram* batch_size_ = nullptr;
  prometheus::Histogram* batch_tokens_ = nullptr;
  prometheus::Counter* joined_rows_ = nullptr;
  prometheus::Histogram* cost_error_ = nullptr;
  prometheus::Gauge* queue_depth_ = nullptr;
  prometheus::Gauge* in_flight_ = nullptr;
  prometheus::Counter* input_tokens_ = nullptr;
  prometheus::Histogram* decoder_steps_ = nullptr;
  prometheus::Counter* output_tokens_ = nullptr;
  prometheus::Counter* budget_met_ = nullptr;
  prometheus::Counter* budget_missed_ = nullptr;
  prometheus::Counter* budget_refused_ = nullptr;
};

struct BuildInfo {
  std::string version;
  std::string commit;
  std::string libtorch;
};

class Metrics {
 public:
  explicit Metrics(const BuildInfo& build);

  /// Serves GET /metrics on host:port (port 0 = any free port). Error if it cannot bind.
  absl::Status StartExposer(const std::string& host, int port);
  /// The port the exposer listens on (useful with port 0), or 0.
  int exposer_port() const;

  /// Creates the model's children and its info series; call once per model, at load.
  ModelMetrics* AddModel(const std::string& model, const std::string& version,
                         const std::string& task, const std::string& family,
                         const std::string& device, double load_seconds);

  /// Counts a finished RPC and observes its duration. `model` must be a loaded model's name or
  /// "" (unknown names are not used as labels, to keep cardinality bounded).
  void RecordRequest(const std::string& model, const std::string& method, const std::string& code,
                     double seconds);

  /// The text exposition format of everything registered (what /metrics serves).
  std::string Render() const;
  const std::shared_ptr<prometheus::Registry>& registry() const { return registry_; }

 private:
  std::shared_ptr<prometheus::Registry> registry_;
  std::unique_ptr<HttpExposer> exposer_;

  prometheus::Family<prometheus::Counter>& requests_;
  prometheus::Family<prometheus::Histogram>& request_duration_;
  prometheus::Family<prometheus::Histogram>& queue_duration_;
  prometheus::Family<prometheus::Histogram>& compute_duration_;
  prometheus::Family<prometheus::Histogram>& steps_;
  prometheus::Family<prometheus::Counter>& budget_;
  prometheus::Family<prometheus::Histogram>& batch_size_;
  prometheus::Family<prometheus::Histogram>& batch_tokens_;
  prometheus::Family<prometheus::Counter>& joined_rows_;
  prometheus::Family<prometheus::Gauge>& queue_depth_;
  prometheus::Family<prometheus::Gauge>& in_flight_;
  prometheus::Family<prometheus::Histogram>& cost_error_;
  prometheus::Family<prometheus::Counter>& input_tokens_;
  prometheus::Family<prometheus::Histogram>& decoder_steps_;
  prometheus::Family<prometheus::Counter>& output_tokens_;
  prometheus::Family<prometheus::Gauge>& model_info_;
  prometheus::Family<prometheus::Gauge>& model_load_seconds_;
  prometheus::Family<prometheus::Gauge>& build_info_;

  std::mutex mutex_;
  std::map<std::string, std::unique_ptr<ModelMetrics>> models_;
  std::map<std::tuple<std::string, std::string, std::string>, prometheus::Counter*> request_counters_;
  std::map<std::pair<std::string, std::string>, prometheus::Histogram*> request_histograms_;
};

}  // namespace odeserve::metrics
