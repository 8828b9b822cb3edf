#pragma once
// An in-process fake odeserve server for the client tests: real gRPC on 127.0.0.1, with
// deterministic answers, a configurable per-call delay, and the standard health service.
// Step choice imitates the real contract: requested steps, else min(12, budget in ms), else 12.

#include <atomic>
#include <chrono>
#include <cmath>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>

#include "absl/strings/str_cat.h"
#include "odeserve/v1/inference.grpc.pb.h"

namespace odeserve::client::testing {

class FakeInference final : public v1::Inference::Service {
 public:
  std::chrono::microseconds delay{0};
  // The slow_call-th call (counting from 1) sleeps slow_delay instead; 0: none.
  int slow_call = 0;
  std::chrono::microseconds slow_delay{0};

  std::string last_authorization() {
    std::lock_guard<std::mutex> l(mu_);
    return last_authorization_;
  }

  grpc::Status Embed(grpc::ServerContext* ctx, const v1::EmbedRequest* req,
                     v1::EmbedResponse* resp) override {
    if (auto s = Check(ctx, req->model(), "emb", req->inputs()); !s.ok()) return s;
    for (const auto& in : req->inputs()) {
      auto* e = resp->add_embeddings();
      float v[4] = {static_cast<float>(in.size()), 1, 2, 3};
      float n = req->normalize() ? std::sqrt(v[0] * v[0] + 14) : 1;
      for (float x : v) e->add_values(x / n);
    }
    resp->set_model(req->model());
    Report(req->compute(), req->inputs_size(), resp->mutable_report());
    return grpc::Status::OK;
  }

  grpc::Status Classify(grpc::ServerContext* ctx, const v1::ClassifyRequest* req,
                        v1::ClassifyResponse* resp) override {
    if (auto s = Check(ctx, req->model(), "cls", req->inputs()); !s.ok()) return s;
    const int k = std::min(3, std::max(1, req->top_k()));
    static const char* kLabels[] = {"libs", "python", "games"};
    static const float kScores[] = {0.7f, 0.2f, 0.1f};
    for (int i = 0; i < req->inputs_size(); ++i) {
      auto* r = resp->add_results();
      for (int j = 0; j < k; ++j) {
        auto* l = r->add_labels();
        l->set_label(kLabels[j]);
        l->set_score(kScores[j]);
      }
    }
    resp->set_model(req->model());
    Report(req->compute(), req->inputs_size(), resp->mutable_report());
    return grpc::Status::OK;
  }

  grpc::Status Translate(grpc::ServerContext* ctx, const v1::TranslateRequest* req,
                         v1::TranslateResponse* resp) override {
    if (auto s = Check(ctx, req->model(), "mt", req->inputs()); !s.ok()) return s;
    for (const auto& in : req->inputs()) {
      resp->add_translations(absl::StrCat("de: ", in));
      resp->add_scores(-0.5f);
    }
    resp->set_model(req->model());
    Report(req->compute(), req->inputs_size(), resp->mutable_report());
    return grpc::Status::OK;
  }

  // Streams "de:" then "de: <input>" (partial), then the final text; the report last.
  grpc::Status TranslateStream(grpc::ServerContext* ctx, const v1::TranslateRequest* req,
                               grpc::ServerWriter<v1::TranslateStreamResponse>* writer) override {
    if (auto s = Check(ctx, req->model(), "mt", req->inputs()); !s.ok()) return s;
    for (int i = 0; i < req->inputs_size(); ++i) {
      v1::TranslateStreamResponse m;
      m.set_index(i);
      m.set_text("de:");
      writer->Write(m);
      m.set_text(absl::StrCat("de: ", req->inputs(i)));
      writer->Write(m);
    }
    for (int i = 0; i < req->inputs_size(); ++i) {
      v1::TranslateStreamResponse m;
      m.set_index(i);
      m.set_text(absl::StrCat("de: ", req->inputs(i)));
      m.set_final(true);
      m.set_score(-0.5f);
      if (i + 1 == req->inputs_size()) Report(req->compute(), req->inputs_size(), m.mutable_report());
      writer->Write(m);
    }
    return grpc::Status::OK;
  }

  grpc::Status ListModels(grpc::ServerContext* ctx, const v1::ListModelsRequest*,
                          v1::ListModelsResponse* resp) override {
    Remember(ctx);
    for (const char* name : {"emb", "cls", "mt"}) Info(name, resp->add_models());
    return grpc::Status::OK;
  }

  grpc::Status GetModel(grpc::ServerContext* ctx, const v1::GetModelRequest* req,
                        v1::GetModelResponse* resp) override {
    Remember(ctx);
    if (req->name() != "emb" && req->name() != "cls" && req->name() != "mt") {
      return grpc::Status(grpc::StatusCode::NOT_FOUND, absl::StrCat("unknown model '", req->name(), "'"));
    }
    Info(req->name(), resp->mutable_model());
    return grpc::Status::OK;
  }

 private:
  void Remember(grpc::ServerContext* ctx) {
    auto it = ctx->client_metadata().find("authorization");
    std::lock_guard<std::mutex> l(mu_);
    last_authorization_ =
        it == ctx->client_metadata().end() ? "" : std::string(it->second.data(), it->second.size());
  }

  grpc::Status Check(grpc::ServerContext* ctx, const std::string& model, const std::string& want,
                     const google::protobuf::RepeatedPtrField<std::string>& inputs) {
    Remember(ctx);
    if (slow_call > 0 && ++calls_ == slow_call) {
      std::this_thread::sleep_for(slow_delay);
    } else if (delay.count() > 0) {
      std::this_thread::sleep_for(delay);
    }
    if (model != "emb" && model != "cls" && model != "mt") {
      return grpc::Status(grpc::StatusCode::NOT_FOUND, absl::StrCat("unknown model '", model, "'"));
    }
    if (model != want) return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, "wrong task");
    if (inputs.empty()) return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "inputs is empty");
    for (int i = 0; i < inputs.size(); ++i) {
      if (inputs[i].empty()) {
        return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, absl::StrCat("input ", i, " is empty"));
      }
    }
    return grpc::Status::OK;
  }

  static void SetMs(double ms, google::protobuf::Duration* d) {
    const int64_t ns = static_cast<int64_t>(ms * 1e6);
    d->set_seconds(ns / 1000000000);
    d->set_nanos(static_cast<int32_t>(ns % 1000000000));
  }

  void Report(const v1::ComputeOptions& c, int rows, v1::ComputeReport* r) {
    const bool budget = c.has_latency_budget();
    const double budget_ms = c.latency_budget().seconds() * 1e3 + c.latency_budget().nanos() / 1e6;
    int steps = 12;
    v1::StepChoice choice = v1::MODEL_DEFAULT;
    if (c.steps() > 0) {
      steps = c.steps();
      choice = v1::REQUESTED;
    } else if (budget) {
      steps = std::max(1, std::min(12, static_cast<int>(budget_ms)));
      choice = v1::BUDGET;
    }
    r->set_steps(steps);
    r->set_solver(c.solver() == v1::SOLVER_UNSPECIFIED ? v1::EULER : c.solver());
    r->set_step_size(12.0f / steps);
    r->set_field_evaluations(steps);
    r->set_step_choice(choice);
    SetMs(0.5, r->mutable_queue_time());
    SetMs(1.5, r->mutable_compute_time());
    SetMs(2.0, r->mutable_total_time());
    SetMs(2.2, r->mutable_predicted_time());
    r->set_budget_set(budget);
    r->set_budget_met(!budget || budget_ms >= 2.0);
    if (budget) *r->mutable_budget() = c.latency_budget();
    r->set_batch_size(rows);
    r->set_device("cpu");
    r->set_tokens(rows * 8);
  }

  static void Info(const std::string& name, v1::ModelInfo* m) {
    m->set_name(name);
    m->set_task(name == "emb" ? v1::EMBEDDING : name == "cls" ? v1::CLASSIFICATION : v1::TRANSLATION);
    m->set_version("1");
    m->set_family("albert");
    m->set_state(v1::READY);
    m->set_trained_depth(12);
    m->set_min_steps(1);
    m->set_max_steps(24);
    m->set_default_steps(12);
    m->add_solvers(v1::EULER);
    m->add_solvers(v1::RK4);
    m->set_parameters(4200000);
    m->set_device("cpu");
    if (name == "cls") {
      for (const char* l : {"libs", "python", "games"}) m->add_labels(l);
      auto* q = m->add_quality_profile();
      q->set_solver(v1::EULER);
      q->set_steps(12);
      q->set_metric("accuracy");
      q->set_value(0.81);
      q->set_dataset("sections-test-en");
    }
  }

  std::mutex mu_;
  std::string last_authorization_;
  std::atomic<int> calls_{0};
};

/// Starts FakeInference + grpc.health.v1 on an ephemeral port; stops on destruction.
class FakeServer {
 public:
  explicit FakeServer(std::shared_ptr<grpc::ServerCredentials> credentials =
                          grpc::InsecureServerCredentials()) {
    grpc::EnableDefaultHealthCheckService(true);
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", credentials, &port_);
    builder.RegisterService(&service_);
    server_ = builder.BuildAndStart();
    auto* health = server_->GetHealthCheckService();
    health->SetServingStatus("odeserve.v1.Inference", true);
    health->SetServingStatus("draining.Service", false);
  }
  ~FakeServer() { server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2)); }
  std::string address() const { return absl::StrCat("127.0.0.1:", port_); }
  FakeInference& service() { return service_; }

 private:
  FakeInference service_;
  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;
};

}  // namespace odeserve::client::testing
