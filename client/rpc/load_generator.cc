#include "client/rpc/load_generator.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <random>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/lib/random.h"
#include "client/lib/stats.h"
#include "client/lib/status_macros.h"
#include "odeserve/v1/inference.grpc.pb.h"

namespace odeserve::client {
namespace {

using Clock = std::chrono::steady_clock;

double MsBetween(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

template <class Response>
void FillReport(const Response& response, CallRecord* r) {
  if (!response.has_report()) return;
  const v1::ComputeReport& rep = response.report();
  r->has_report = true;
  r->steps = rep.steps();
  r->solver = rep.solver();
  r->field_evaluations = rep.field_evaluations();
  r->step_choice = rep.step_choice();
  r->queue_ms = ProtoMs(rep.queue_time());
  r->compute_ms = ProtoMs(rep.compute_time());
  r->server_total_ms = ProtoMs(rep.total_time());
  r->predicted_ms = ProtoMs(rep.predicted_time());
  r->budget_met = rep.budget_met();
  r->batch_size = rep.batch_size();
}

class LoadRun {
 public:
  LoadRun(const LoadConfig& config, v1::ComputeOptions base,
          std::vector<std::unique_ptr<v1::Inference::Stub>> stubs)
      : cfg_(config),
        base_(std::move(base)),
        stubs_(std::move(stubs)),
        rng_(config.seed),
        sampler_(config.budgets, config.seed ^ 0x9e3779b97f4a7c15ULL) {}

  LoadResult Run();

 private:
  struct Call {
    grpc::ClientContext context;
    v1::EmbedRequest embed_request;
    v1::EmbedResponse embed_response;
    v1::ClassifyRequest classify_request;
    v1::ClassifyResponse classify_response;
    v1::TranslateRequest translate_request;
    v1::TranslateResponse translate_response;
    size_t budget_class = 0;
    Clock::time_point scheduled;
    double send_lag_ms = 0;
    bool measured = false;
  };

  void Issue(Clock::time_point scheduled, size_t budget_class);  // issuing thread only
  void OnDone(Call* call, const grpc::Status& status);
  void ProgressLoop();
  bool InWindow(Clock::time_point t) const { return t >= measure_start_ && t < measure_end_; }

  const LoadConfig& cfg_;
  const bool open_loop_ = cfg_.rate > 0;
  const v1::ComputeOptions base_;
  std::vector<std::unique_ptr<v1::Inference::Stub>> stubs_;
  size_t next_stub_ = 0;
  std::mt19937_64 rng_;
  BudgetSampler sampler_;
  Clock::time_point start_, measure_start_, measure_end_;

  std::mutex mu_;
  std::condition_variable cv_;
  int64_t inflight_ = 0;      // guarded by mu_
  int pending_reissues_ = 0;  // closed loop, guarded by mu_
  bool stop_progress_ = false;
  LoadResult result_;         // guarded by mu_
  LogHistogram live_;         // measured OK latencies, guarded by mu_
  Clock::time_point last_measured_done_;

  std::atomic<int64_t> sent_{0}, ok_{0}, errors_{0};
};

void LoadRun::Issue(Clock::time_point scheduled, size_t budget_class) {
  auto* call = new Call;
  call->scheduled = scheduled;
  call->measured = InWindow(scheduled);
  call->budget_class = budget_class;
  const BudgetClass& cls = cfg_.budgets[call->budget_class];
  const absl::Duration lag = absl::FromChrono(std::max(Clock::duration::zero(), Clock::now() - scheduled));
  call->send_lag_ms = absl::ToDoubleMilliseconds(lag);
  std::optional<absl::Duration> budget = cls.budget;
  if (budget && cfg_.charge_send_lag) budget = RemainingBudget(*budget, lag);
  v1::ComputeOptions compute = base_;
  if (budget) SetDuration(*budget, compute.mutable_latency_budget());
  std::optional<absl::Duration> deadline = cfg_.timeout;
  if (cfg_.set_deadline && budget) deadline = *budget;
  PrepareContext(call->context, cfg_.connection, deadline);

  auto add_inputs = [&](google::protobuf::RepeatedPtrField<std::string>* inputs) {
    for (int i = 0; i < cfg_.batch; ++i) {
      *inputs->Add() = cfg_.inputs[UniformIndex(rng_, cfg_.inputs.size())];
    }
  };
  v1::Inference::Stub* stub = stubs_[next_stub_++ % stubs_.size()].get();
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++inflight_;
    if (call->measured) ++result_.totals.sent;
  }
  ++sent_;
  auto done = [this, call](grpc::Status s) { OnDone(call, s); };
  if (cfg_.method == "embed") {
    auto& req = call->embed_request;
    req.set_model(cfg_.model);
    add_inputs(req.mutable_inputs());
    *req.mutable_compute() = std::move(compute);
    req.set_normalize(cfg_.normalize);
    req.set_truncate(cfg_.truncate);
    stub->async()->Embed(&call->context, &req, &call->embed_response, std::move(done));
  } else if (cfg_.method == "classify") {
    auto& req = call->classify_request;
    req.set_model(cfg_.model);
    add_inputs(req.mutable_inputs());
    *req.mutable_compute() = std::move(compute);
    req.set_top_k(cfg_.top_k);
    req.set_truncate(cfg_.truncate);
    stub->async()->Classify(&call->context, &req, &call->classify_response, std::move(done));
  } else {
    auto& req = call->translate_request;
    req.set_model(cfg_.model);
    add_inputs(req.mutable_inputs());
    *req.mutable_compute() = std::move(compute);
    req.set_beam_size(cfg_.beam_size);
    req.set_truncate(cfg_.truncate);
    stub->async()->Translate(&call->context, &req, &call->translate_response, std::move(done));
  }
}

void LoadRun::OnDone(Call* call, const grpc::Status& status) {
  const Clock::time_point now = Clock::now();
  CallRecord r;
  r.budget_class = call->budget_class;
  r.latency_ms = MsBetween(call->scheduled, now);
  r.send_lag_ms = call->send_lag_ms;
  r.code = static_cast<int>(status.error_code());
  if (status.ok()) {
    if (cfg_.method == "embed") {
      FillReport(call->embed_response, &r);
    } else if (cfg_.method == "classify") {
      FillReport(call->classify_response, &r);
    } else {
      FillReport(call->translate_response, &r);
    }
    ++ok_;
  } else {
    ++errors_;
  }
  const bool measured = call->measured;
  delete call;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (measured) {
      result_.records.push_back(r);
      if (status.ok()) live_.Record(r.latency_ms);
      last_measured_done_ = std::max(last_measured_done_, now);
    }
    if (status.ok() && InWindow(now)) ++result_.totals.ok_in_window;
    --inflight_;
    if (!open_loop_ && now < measure_end_) ++pending_reissues_;
    // Notify under the lock: once inflight_ reaches 0 Run() may return and destroy cv_.
    cv_.notify_all();
  }
}

void LoadRun::ProgressLoop() {
  int64_t last_ok = 0;
  auto next = start_ + std::chrono::seconds(1);
  std::unique_lock<std::mutex> lock(mu_);
  while (!cv_.wait_until(lock, next, [this] { return stop_progress_; })) {
    const double t = std::chrono::duration<double>(Clock::now() - start_).count();
    const int64_t ok = ok_.load();
    const double p99 = live_.Percentile(99);
    const int64_t inflight = inflight_;
    const char* phase = Clock::now() < measure_start_ ? "warmup " : "measure";
    // Written unlocked: a slow stderr (a paused pipe) must not hold up issuing and completions.
    lock.unlock();
    *cfg_.progress << absl::StrFormat(
        "%s[%6.1fs] %s sent %d ok %d errors %d inflight %d rps %.1f p99 %s\n",
        cfg_.progress_label, t, phase, sent_.load(), ok, errors_.load(), inflight,
        static_cast<double>(ok - last_ok),
        std::isnan(p99) ? std::string("-") : absl::StrFormat("%.2fms", p99));
    cfg_.progress->flush();
    last_ok = ok;
    next += std::chrono::seconds(1);
    lock.lock();
  }
}

LoadResult LoadRun::Run() {
  start_ = Clock::now();
  measure_start_ = start_ + absl::ToChronoNanoseconds(cfg_.warmup);
  measure_end_ = measure_start_ + absl::ToChronoNanoseconds(cfg_.duration);
  last_measured_done_ = measure_start_;
  std::thread progress;
  if (cfg_.progress) progress = std::thread([this] { ProgressLoop(); });

  if (open_loop_) {
    PoissonArrivals arrivals(cfg_.rate, cfg_.seed);
    Clock::time_point t = start_;
    while (true) {
      t += std::chrono::duration_cast<Clock::duration>(
          std::chrono::duration<double>(arrivals.NextGapSeconds()));
      if (t >= measure_end_) break;
      std::this_thread::sleep_until(t);
      // The class is drawn first: a dropped arrival is a miss of its class, not a call unseen.
      const size_t budget_class = sampler_.Next();
      bool full;
      {
        std::lock_guard<std::mutex> lock(mu_);
        full = inflight_ >= cfg_.max_inflight;
        if (full && InWindow(t)) {
          ++result_.totals.dropped;
          CallRecord dropped;
          dropped.budget_class = budget_class;
          dropped.code = kDroppedCode;
          result_.records.push_back(dropped);
        }
      }
      if (!full) Issue(t, budget_class);
    }
  } else {
    for (int i = 0; i < cfg_.concurrency; ++i) Issue(Clock::now(), sampler_.Next());
    std::unique_lock<std::mutex> lock(mu_);
    while (Clock::now() < measure_end_) {
      cv_.wait_until(lock, measure_end_, [this] { return pending_reissues_ > 0; });
      while (pending_reissues_ > 0 && Clock::now() < measure_end_) {
        --pending_reissues_;
        lock.unlock();
        Issue(Clock::now(), sampler_.Next());
        lock.lock();
      }
    }
  }
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [this] { return inflight_ == 0; });
  stop_progress_ = true;
  lock.unlock();
  cv_.notify_all();
  if (progress.joinable()) progress.join();
  result_.totals.window_s = absl::ToDoubleSeconds(cfg_.duration);
  result_.totals.drain_s =
      std::max(0.0, std::chrono::duration<double>(last_measured_done_ - measure_end_).count());
  return std::move(result_);
}

}  // namespace

absl::Duration RemainingBudget(absl::Duration budget, absl::Duration lag) {
  return std::max(budget - lag, absl::Microseconds(1));
}

absl::Status ValidateLoadConfig(const LoadConfig& c) {
  if (c.method != "embed" && c.method != "classify" && c.method != "translate") {
    return absl::InvalidArgumentError(
        absl::StrCat("--method must be embed, classify or translate, got '", c.method, "'"));
  }
  if (c.inputs.empty()) return absl::InvalidArgumentError("no inputs to send");
  if (c.batch < 1) return absl::InvalidArgumentError(absl::StrCat("--batch must be >= 1, got ", c.batch));
  if (c.budgets.empty()) return absl::InvalidArgumentError("the budget mix is empty");
  if (!(c.rate >= 0 && c.rate <= kMaxRate)) {  // NaN fails both
    return absl::InvalidArgumentError(
        absl::StrCat("--rate must be between 0 and ", kMaxRate, " req/s, got ", c.rate));
  }
  if (c.rate <= 0 && c.concurrency < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--concurrency must be >= 1, got ", c.concurrency));
  }
  if (c.connections < 1) return absl::InvalidArgumentError("--connections must be >= 1");
  // Finite: the window's end is a steady-clock time point, which an infinite duration overflows.
  if (c.duration <= absl::ZeroDuration() || c.duration == absl::InfiniteDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--duration must be > 0 and finite, got ", absl::FormatDuration(c.duration)));
  }
  if (c.warmup < absl::ZeroDuration() || c.warmup == absl::InfiniteDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--warmup must be >= 0 and finite, got ", absl::FormatDuration(c.warmup)));
  }
  if (c.timeout <= absl::ZeroDuration()) return absl::InvalidArgumentError("--timeout must be > 0");
  if (c.max_inflight < 1) return absl::InvalidArgumentError("--max_inflight must be >= 1");
  return BuildComputeOptions(c.compute).status();
}

absl::StatusOr<LoadResult> RunLoad(const LoadConfig& config) {
  OC_RETURN_IF_ERROR(ValidateLoadConfig(config));
  ComputeFlags flags = config.compute;
  flags.budget.reset();
  OC_ASSIGN_OR_RETURN(v1::ComputeOptions base, BuildComputeOptions(flags));
  std::vector<std::unique_ptr<v1::Inference::Stub>> stubs;
  for (int i = 0; i < config.connections; ++i) {
    OC_ASSIGN_OR_RETURN(auto channel, MakeChannel(config.connection, i));
    OC_RETURN_IF_ERROR(WaitForConnected(*channel, config.connection.address, config.connect_timeout));
    stubs.push_back(v1::Inference::NewStub(channel));
  }
  LoadRun run(config, std::move(base), std::move(stubs));
  return run.Run();
}

}  // namespace odeserve::client
