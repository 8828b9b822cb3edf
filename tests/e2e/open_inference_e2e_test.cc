// End-to-end: inference.GRPCInferenceService (Open Inference Protocol / KServe v2) on the real
// odeserve binary over loopback. The v2 client is built from proto/inference/grpc_predict_v2.proto
// alone; odeserve.v1 is called only to check that both APIs give the same outputs and errors for
// the same inputs and options.

#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <iterator>
#include <random>
#include <thread>
#include <tuple>

#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include "inference/grpc_predict_v2.grpc.pb.h"
#include "tests/common/infer_parameters.h"
#include "odeserve/v1/inference.grpc.pb.h"
#include "tests/e2e/server_process.h"

namespace odeserve {
namespace {

namespace fs = std::filesystem;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

// The test models, a broken classifier, and a copy of tiny-albert that waits 1 s for company
// (a call on it is in flight long enough to SIGTERM the server under it).
fs::path MakeRepository() {
  const fs::path repo = testing::CopyToTemp(ODESERVE_TEST_REPOSITORY, "oip-repo");
  fs::remove(repo / ".stamp");
  testing::CopyModel(repo, "tiny-classifier", "broken-classifier", {{"trained_depth: 4", "trained_depth: 0"}});
  testing::CopyModel(repo, "tiny-albert", "slow-queue",
                     {{"max_queue_delay_us: 1000", "max_queue_delay_us: 1000000\n  queue_delay_when_idle: true"}});
  return repo;
}

// --- a v2 client's helpers, from the v2 proto alone ----------------------------------------

using testing::Bool;
using testing::Int;
using testing::Str;

// A `text` tensor in contents.bytes_contents.
inference::ModelInferRequest TextRequest(const std::string& model, const std::vector<std::string>& texts) {
  inference::ModelInferRequest request;
  request.set_model_name(model);
  auto* input = request.add_inputs();
  input->set_name("text");
  input->set_datatype("BYTES");
  input->add_shape(static_cast<int64_t>(texts.size()));
  for (const auto& text : texts) input->mutable_contents()->add_bytes_contents(text);
  return request;
}

// The raw layout of a BYTES tensor: a 4-byte little-endian length before each element.
std::string RawBytes(const std::vector<std::string>& texts) {
  std::string raw;
  for (const auto& text : texts) {
    const auto n = static_cast<uint32_t>(text.size());
    for (int shift = 0; shift < 32; shift += 8) raw.push_back(static_cast<char>((n >> shift) & 0xFF));
    raw += text;
  }
  return raw;
}

// What tritonclient's gRPC client sends: the same tensor in raw_input_contents.
inference::ModelInferRequest RawTextRequest(const std::string& model, const std::vector<std::string>& texts) {
  inference::ModelInferRequest request = TextRequest(model, {});
  request.mutable_inputs(0)->set_shape(0, static_cast<int64_t>(texts.size()));
  request.add_raw_input_contents(RawBytes(texts));
  return request;
}

// An output's elements, typed or raw.
const inference::ModelInferResponse::InferOutputTensor* FindOutput(const inference::ModelInferResponse& response,
                                                                  const std::string& name, int* index = nullptr) {
  for (int i = 0; i < response.outputs_size(); ++i) {
    if (response.outputs(i).name() == name) {
      if (index) *index = i;
      return &response.outputs(i);
    }
  }
  return nullptr;
}

std::vector<float> Fp32Output(const inference::ModelInferResponse& response, const std::string& name) {
  int index = 0;
  const auto* output = FindOutput(response, name, &index);
  EXPECT_NE(output, nullptr) << name;
  if (output == nullptr) return {};
  EXPECT_EQ(output->datatype(), "FP32");
  if (response.raw_output_contents_size() == 0) {
    return {output->contents().fp32_contents().begin(), output->contents().fp32_contents().end()};
  }
  const std::string& raw = response.raw_output_contents(index);
  std::vector<float> values(raw.size() / 4);
  std::memcpy(values.data(), raw.data(), values.size() * 4);  // little-endian host
  return values;
}

std::vector<std::string> BytesOutput(const inference::ModelInferResponse& response, const std::string& name) {
  int index = 0;
  const auto* output = FindOutput(response, name, &index);
  EXPECT_NE(output, nullptr) << name;
  if (output == nullptr) return {};
  EXPECT_EQ(output->datatype(), "BYTES");
  if (response.raw_output_contents_size() == 0) {
    return {output->contents().bytes_contents().begin(), output->contents().bytes_contents().end()};
  }
  const std::string& raw = response.raw_output_contents(index);
  std::vector<std::string> texts;
  for (size_t pos = 0; pos + 4 <= raw.size();) {
    uint32_t n = 0;
    for (int b = 0; b < 4; ++b) n |= uint32_t{static_cast<unsigned char>(raw[pos + b])} << (8 * b);
    texts.push_back(raw.substr(pos + 4, n));
    pos += 4 + n;
  }
  return texts;
}

std::vector<int64_t> ShapeOf(const inference::ModelInferResponse& response, const std::string& name) {
  const auto* output = FindOutput(response, name);
  if (output == nullptr) return {};
  return {output->shape().begin(), output->shape().end()};
}

// The value of one sample line on a /metrics page; 0 when absent.
double MetricValue(const std::string& page, const std::string& series) {
  const size_t at = page.find("\n" + series + " ");
  if (at == std::string::npos) return 0;
  return std::stod(page.substr(at + series.size() + 2));
}

class OpenInferenceTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { server_.Start(ODESERVE_BINARY, MakeRepository()); }
  static void TearDownTestSuite() { server_.Stop(); }
  void SetUp() override {
    ASSERT_TRUE(server_.ok());
    v2_ = inference::GRPCInferenceService::NewStub(server_->channel());
    v1_ = server_->stub();
  }

  grpc::Status Infer(const inference::ModelInferRequest& request, inference::ModelInferResponse* response,
                     std::chrono::milliseconds deadline = std::chrono::milliseconds(0)) {
    grpc::ClientContext context;
    if (deadline.count() > 0) context.set_deadline(std::chrono::system_clock::now() + deadline);
    return v2_->ModelInfer(&context, request, response);
  }
  grpc::Status Metadata(const std::string& name, inference::ModelMetadataResponse* response,
                        const std::string& version = "") {
    grpc::ClientContext context;
    inference::ModelMetadataRequest request;
    request.set_name(name);
    request.set_version(version);
    return v2_->ModelMetadata(&context, request, response);
  }
  grpc::Status Ready(const std::string& name, bool* ready, const std::string& version = "") {
    grpc::ClientContext context;
    inference::ModelReadyRequest request;
    request.set_name(name);
    request.set_version(version);
    inference::ModelReadyResponse response;
    const grpc::Status status = v2_->ModelReady(&context, request, &response);
    *ready = response.ready();
    return status;
  }
  void ExpectStillServing() {
    inference::ModelInferResponse response;
    const grpc::Status status = Infer(TextRequest("tiny-albert", {"still serving"}), &response);
    ASSERT_TRUE(status.ok()) << status.error_message();
  }

  static testing::SuiteServer server_;
  std::unique_ptr<inference::GRPCInferenceService::Stub> v2_;
  std::unique_ptr<v1::Inference::Stub> v1_;
};

testing::SuiteServer OpenInferenceTest::server_;

TEST_F(OpenInferenceTest, ServerLiveReadyAndMetadata) {
  {
    grpc::ClientContext context;
    inference::ServerLiveResponse response;
    ASSERT_TRUE(v2_->ServerLive(&context, {}, &response).ok());
    EXPECT_TRUE(response.live());
  }
  {
    grpc::ClientContext context;
    inference::ServerReadyResponse response;
    ASSERT_TRUE(v2_->ServerReady(&context, {}, &response).ok());
    EXPECT_TRUE(response.ready());
  }
  grpc::ClientContext context;
  inference::ServerMetadataResponse response;
  ASSERT_TRUE(v2_->ServerMetadata(&context, {}, &response).ok());
  EXPECT_EQ(response.name(), "odeserve");
  EXPECT_EQ(response.version(), ODESERVE_VERSION);
  EXPECT_THAT(response.extensions(), IsEmpty()) << "no protocol extension is implemented";
}

TEST_F(OpenInferenceTest, ModelReadyPerModelAndVersion) {
  bool ready = false;
  ASSERT_TRUE(Ready("tiny-albert", &ready).ok());
  EXPECT_TRUE(ready);
  ASSERT_TRUE(Ready("tiny-translator", &ready, "1").ok());
  EXPECT_TRUE(ready);
  ASSERT_TRUE(Ready("broken-classifier", &ready).ok());
  EXPECT_FALSE(ready) << "a model that failed to load is not ready";
  const grpc::Status version = Ready("tiny-albert", &ready, "7");
  EXPECT_EQ(version.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_THAT(version.error_message(), HasSubstr("has no version '7'"));
  EXPECT_EQ(Ready("no-such-model", &ready).error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(Ready("", &ready).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
}

TEST_F(OpenInferenceTest, ModelMetadataForEveryModelFollowsItsTask) {
  grpc::ClientContext list_context;
  v1::ListModelsResponse models;
  ASSERT_TRUE(v1_->ListModels(&list_context, {}, &models).ok());
  int described = 0;
  for (const auto& model : models.models()) {
    inference::ModelMetadataResponse metadata;
    const grpc::Status status = Metadata(model.name(), &metadata);
    if (model.state() != v1::READY) {
      EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << model.name();
      EXPECT_THAT(status.error_message(), HasSubstr("failed to load"));
      continue;
    }
    ASSERT_TRUE(status.ok()) << model.name() << ": " << status.error_message();
    ++described;
    EXPECT_EQ(metadata.name(), model.name());
    EXPECT_THAT(metadata.versions(), ElementsAre(model.version()));
    EXPECT_EQ(metadata.platform(), "odeserve_torchscript");
    ASSERT_EQ(metadata.inputs_size(), 1);
    EXPECT_EQ(metadata.inputs(0).name(), "text");
    EXPECT_EQ(metadata.inputs(0).datatype(), "BYTES");
    EXPECT_THAT(metadata.inputs(0).shape(), ElementsAre(-1));
    std::vector<std::tuple<std::string, std::string, std::vector<int64_t>>> outputs;
    for (const auto& o : metadata.outputs()) outputs.emplace_back(o.name(), o.datatype(), std::vector<int64_t>(o.shape().begin(), o.shape().end()));
    using Out = std::tuple<std::string, std::string, std::vector<int64_t>>;
    switch (model.task()) {
      case v1::EMBEDDING:
        EXPECT_THAT(outputs, ElementsAre(Out{"embedding", "FP32", {-1, model.embedding_dimension()}})) << model.name();
        break;
      case v1::CLASSIFICATION:
        EXPECT_THAT(outputs, ElementsAre(Out{"probabilities", "FP32", {-1, model.labels_size()}},
                                         Out{"label", "BYTES", {-1}}))
            << model.name();
        break;
      case v1::TRANSLATION:
        EXPECT_THAT(outputs, ElementsAre(Out{"translation", "BYTES", {-1}}, Out{"score", "FP32", {-1}})) << model.name();
        break;
      default: ADD_FAILURE() << model.name();
    }
  }
  EXPECT_GE(described, 7);
  inference::ModelMetadataResponse metadata;
  EXPECT_EQ(Metadata("no-such-model", &metadata).error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(Metadata("tiny-albert", &metadata, "2").error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_TRUE(Metadata("tiny-albert", &metadata, "1").ok());
}

TEST_F(OpenInferenceTest, EmbeddingsEqualV1sForTheSameOptionsTypedAndRaw) {
  const std::vector<std::string> texts = {"a library for parsing xml files", "Bibliothek zum Lesen", "jeu"};
  for (const std::string model : {"tiny-albert", "tiny-sharebert", "tiny-eelbert"}) {
    v1::EmbedRequest v1_request;
    v1_request.set_model(model);
    for (const auto& t : texts) v1_request.add_inputs(t);
    v1_request.mutable_compute()->set_steps(3);
    v1_request.mutable_compute()->set_solver(v1::HEUN);
    v1_request.set_normalize(true);
    grpc::ClientContext v1_context;
    v1::EmbedResponse expected;
    ASSERT_TRUE(v1_->Embed(&v1_context, v1_request, &expected).ok());

    for (const bool raw : {false, true}) {
      auto request = raw ? RawTextRequest(model, texts) : TextRequest(model, texts);
      request.set_id("call-" + model);
      auto& p = *request.mutable_parameters();
      p["steps"] = Int(3);
      p["solver"] = Str("heun");
      p["normalize"] = Bool(true);
      inference::ModelInferResponse response;
      const grpc::Status status = Infer(request, &response);
      ASSERT_TRUE(status.ok()) << model << ": " << status.error_message();
      EXPECT_EQ(response.model_name(), model);
      EXPECT_EQ(response.model_version(), "1");
      EXPECT_EQ(response.id(), "call-" + model);
      EXPECT_EQ(response.raw_output_contents_size(), raw ? 1 : 0) << "raw in, raw out";
      const int dim = expected.embeddings(0).values_size();
      EXPECT_THAT(ShapeOf(response, "embedding"), ElementsAre(3, dim));
      const std::vector<float> values = Fp32Output(response, "embedding");
      ASSERT_EQ(values.size(), texts.size() * dim);
      for (size_t r = 0; r < texts.size(); ++r) {
        for (int i = 0; i < dim; ++i) {
          EXPECT_EQ(values[r * dim + i], expected.embeddings(r).values(i)) << model << " row " << r << " value " << i;
        }
      }
      const auto& parameters = response.parameters();
      EXPECT_EQ(parameters.at("steps").int64_param(), 3);
      EXPECT_EQ(parameters.at("solver").string_param(), "heun");
      EXPECT_EQ(parameters.at("field_evaluations").int64_param(), 6);
      EXPECT_EQ(parameters.at("step_choice").string_param(), "requested");
      EXPECT_TRUE(parameters.at("budget_met").bool_param());
      EXPECT_GE(parameters.at("queue_us").int64_param(), 0);
      EXPECT_GT(parameters.at("compute_us").int64_param(), 0);
    }
  }
}

TEST_F(OpenInferenceTest, ClassificationEqualsV1sProbabilitiesAndLabels) {
  const std::vector<std::string> texts = {"Python bindings for the GTK toolkit", "a game with dragons"};
  for (const std::string model : {"tiny-classifier", "tiny-lexical", "tiny-probe"}) {
    v1::ClassifyRequest v1_request;
    v1_request.set_model(model);
    for (const auto& t : texts) v1_request.add_inputs(t);
    v1_request.set_top_k(4);  // every label
    v1_request.mutable_compute()->set_steps(2);
    grpc::ClientContext v1_context;
    v1::ClassifyResponse expected;
    ASSERT_TRUE(v1_->Classify(&v1_context, v1_request, &expected).ok());
    grpc::ClientContext info_context;
    v1::GetModelRequest get;
    get.set_name(model);
    v1::GetModelResponse info;
    ASSERT_TRUE(v1_->GetModel(&info_context, get, &info).ok());
    const auto& labels = info.model().labels();

    auto request = TextRequest(model, texts);
    (*request.mutable_parameters())["steps"] = Int(2);
    inference::ModelInferResponse response;
    ASSERT_TRUE(Infer(request, &response).ok());
    EXPECT_THAT(ShapeOf(response, "probabilities"), ElementsAre(2, labels.size()));
    EXPECT_THAT(ShapeOf(response, "label"), ElementsAre(2));
    const std::vector<float> probabilities = Fp32Output(response, "probabilities");
    const std::vector<std::string> best = BytesOutput(response, "label");
    ASSERT_EQ(best.size(), texts.size());
    for (size_t r = 0; r < texts.size(); ++r) {
      EXPECT_EQ(best[r], expected.results(r).labels(0).label()) << model;
      for (const auto& scored : expected.results(r).labels()) {
        const int index = static_cast<int>(std::find(labels.begin(), labels.end(), scored.label()) - labels.begin());
        EXPECT_EQ(probabilities[r * labels.size() + index], scored.score()) << model << " " << scored.label();
      }
    }

    // top_k 2 makes `label` [N, 2], best first, as v1's top 2.
    (*request.mutable_parameters())["top_k"] = Int(2);
    request.add_outputs()->set_name("label");
    inference::ModelInferResponse top2;
    ASSERT_TRUE(Infer(request, &top2).ok());
    ASSERT_EQ(top2.outputs_size(), 1) << "only the requested output";
    EXPECT_THAT(ShapeOf(top2, "label"), ElementsAre(2, 2));
    EXPECT_THAT(BytesOutput(top2, "label"),
                ElementsAre(expected.results(0).labels(0).label(), expected.results(0).labels(1).label(),
                            expected.results(1).labels(0).label(), expected.results(1).labels(1).label()));
  }
}

TEST_F(OpenInferenceTest, TranslationEqualsV1sGreedyAndBeam) {
  const std::vector<std::string> texts = {"library for reading and writing compressed archives",
                                          "development files", "x"};
  for (const int beam : {0, 3}) {
    v1::TranslateRequest v1_request;
    v1_request.set_model("tiny-translator");
    for (const auto& t : texts) v1_request.add_inputs(t);
    v1_request.set_beam_size(beam);
    v1_request.mutable_compute()->set_steps(3);
    v1_request.mutable_compute()->set_decoder_steps(2);
    grpc::ClientContext v1_context;
    v1::TranslateResponse expected;
    ASSERT_TRUE(v1_->Translate(&v1_context, v1_request, &expected).ok());

    auto request = RawTextRequest("tiny-translator", texts);
    auto& p = *request.mutable_parameters();
    p["beam_size"] = Int(beam);
    p["steps"] = Int(3);
    p["decoder_steps"] = Int(2);
    p["binary_data_output"] = Bool(false);  // typed outputs although the input was raw
    inference::ModelInferResponse response;
    const grpc::Status status = Infer(request, &response);
    ASSERT_TRUE(status.ok()) << status.error_message();
    EXPECT_EQ(response.raw_output_contents_size(), 0);
    EXPECT_THAT(ShapeOf(response, "translation"), ElementsAre(3));
    EXPECT_THAT(BytesOutput(response, "translation"),
                ElementsAre(expected.translations(0), expected.translations(1), expected.translations(2)));
    EXPECT_THAT(Fp32Output(response, "score"), ElementsAre(expected.scores(0), expected.scores(1), expected.scores(2)));
    EXPECT_EQ(response.parameters().at("decoder_steps").int64_param(), 2);
    EXPECT_EQ(response.parameters().at("beam_size").int64_param(), std::max(1, beam));
    EXPECT_EQ(response.parameters().at("output_tokens").int64_param(), expected.report().output_tokens());
  }
}

TEST_F(OpenInferenceTest, TheDeadlineIsTheBudgetAsInV1) {
  inference::ModelInferResponse response;
  ASSERT_TRUE(Infer(TextRequest("tiny-albert", {"with a deadline"}), &response, std::chrono::seconds(20)).ok());
  EXPECT_TRUE(response.parameters().at("budget_set").bool_param());
  EXPECT_LE(response.parameters().at("budget_us").int64_param(), 20000000);
  EXPECT_EQ(response.parameters().at("step_choice").string_param(), "budget");

  // An impossible budget under refuse: DEADLINE_EXCEEDED at once, as v1.
  auto refused = TextRequest("tiny-albert", {"too fast"});
  (*refused.mutable_parameters())["latency_budget_us"] = Int(1);
  (*refused.mutable_parameters())["on_budget_miss"] = Str("refuse");
  EXPECT_EQ(Infer(refused, &response).error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
}

struct BadTensor {
  std::string name;
  std::function<void(inference::ModelInferRequest&)> mutate;
  std::string message;
};

TEST_F(OpenInferenceTest, EveryBadTensorOrParameterIsInvalidArgumentNamingIt) {
  const std::vector<BadTensor> cases = {
      {"wrong datatype", [](auto& r) { r.mutable_inputs(0)->set_datatype("FP32"); },
       "input 'text' has datatype 'FP32'; expected BYTES"},
      {"shape product != elements", [](auto& r) { r.mutable_inputs(0)->set_shape(0, 3); },
       "input 'text' has shape [3] but 2 elements"},
      {"rank 2", [](auto& r) {
         r.mutable_inputs(0)->set_shape(0, 1);
         r.mutable_inputs(0)->add_shape(2);
       },
       "input 'text' has shape [1, 2] (rank 2); expected rank 1: [N]"},
      {"missing text", [](auto& r) { r.mutable_inputs(0)->set_name("INPUT0"); }, "unknown input tensor 'INPUT0'"},
      {"no inputs", [](auto& r) { r.clear_inputs(); }, "input tensor 'text' is missing"},
      {"unknown parameter", [](auto& r) { (*r.mutable_parameters())["temperature"] = Int(1); },
       "unknown parameter 'temperature'"},
      {"parameter of the wrong type", [](auto& r) { (*r.mutable_parameters())["steps"] = Str("3"); },
       "parameter 'steps' must be an integer (int64_param), got string_param"},
      {"unknown solver", [](auto& r) { (*r.mutable_parameters())["solver"] = Str("midpoint"); },
       "parameter 'solver' is 'midpoint'"},
      {"raw contents that do not parse", [](auto& r) {
         r.mutable_inputs(0)->clear_contents();
         r.add_raw_input_contents(RawBytes({"first"}) + std::string("\x03\x00", 2));
       },
       "raw_input_contents[0] (input 'text') is truncated: element 1 at byte 9 needs a 4-byte length prefix"},
      {"raw length past the end", [](auto& r) {
         r.mutable_inputs(0)->clear_contents();
         r.add_raw_input_contents(std::string("\x40\x00\x00\x00", 4) + "short");
       },
       "element 0 declares 64 bytes at byte 4, but 5 bytes are left"},
      {"invalid UTF-8", [](auto& r) { r.mutable_inputs(0)->mutable_contents()->set_bytes_contents(1, "ok\xC3\x28"); },
       "input 'text' element 1 is not valid UTF-8"},
      {"unknown output", [](auto& r) { r.add_outputs()->set_name("logits"); }, "unknown output 'logits'"},
      {"typed numbers in a BYTES tensor", [](auto& r) { r.mutable_inputs(0)->mutable_contents()->add_int_contents(1); },
       "input 'text' is BYTES but sets contents.int_contents"},
  };
  for (const auto& c : cases) {
    auto request = TextRequest("tiny-albert", {"valid", "texts"});
    c.mutate(request);
    inference::ModelInferResponse response;
    const grpc::Status status = Infer(request, &response);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << c.name << ": " << status.error_message();
    EXPECT_THAT(status.error_message(), HasSubstr(c.message)) << c.name;
    ExpectStillServing();
  }
}

// The same situation gets the same code and message from both APIs: they share the core.
TEST_F(OpenInferenceTest, ErrorsShareV1sCodesAndMessages) {
  struct Case {
    std::string name;
    std::function<void(inference::ModelInferRequest&)> v2;
    std::function<void(v1::EmbedRequest&)> v1;
  };
  const std::vector<Case> cases = {
      {"unknown model", [](auto& r) { r.set_model_name("no-such-model"); },
       [](auto& r) { r.set_model("no-such-model"); }},
      {"failed model", [](auto& r) { r.set_model_name("broken-classifier"); },
       [](auto& r) { r.set_model("broken-classifier"); }},
      {"steps out of range", [](auto& r) { (*r.mutable_parameters())["steps"] = Int(9); },
       [](auto& r) { r.mutable_compute()->set_steps(9); }},
      {"min_steps above steps", [](auto& r) {
         (*r.mutable_parameters())["steps"] = Int(2);
         (*r.mutable_parameters())["min_steps"] = Int(4);
       },
       [](auto& r) {
         r.mutable_compute()->set_steps(2);
         r.mutable_compute()->set_min_steps(4);
       }},
      {"zero budget", [](auto& r) { (*r.mutable_parameters())["latency_budget_us"] = Int(0); },
       [](auto& r) { r.mutable_compute()->mutable_latency_budget()->set_seconds(0); }},
      {"decoder steps on an encoder", [](auto& r) { (*r.mutable_parameters())["decoder_steps"] = Int(2); },
       [](auto& r) { r.mutable_compute()->set_decoder_steps(2); }},
      {"empty text", [](auto& r) {
         r.mutable_inputs(0)->mutable_contents()->add_bytes_contents("");
         r.mutable_inputs(0)->set_shape(0, 2);
       },
       [](auto& r) { r.add_inputs(""); }},
      {"empty tensor", [](auto& r) {
         r.mutable_inputs(0)->mutable_contents()->clear_bytes_contents();
         r.mutable_inputs(0)->set_shape(0, 0);
       },
       [](auto& r) { r.clear_inputs(); }},
      {"too long", [](auto& r) {
         r.mutable_inputs(0)->mutable_contents()->set_bytes_contents(0, std::string(4000, 'x'));
       },
       [](auto& r) { r.set_inputs(0, std::string(4000, 'x')); }},
  };
  for (const auto& c : cases) {
    auto v2_request = TextRequest("tiny-albert", {"valid first input"});
    c.v2(v2_request);
    v1::EmbedRequest v1_request;
    v1_request.set_model("tiny-albert");
    v1_request.add_inputs("valid first input");
    c.v1(v1_request);
    inference::ModelInferResponse v2_response;
    const grpc::Status v2_status = Infer(v2_request, &v2_response);
    grpc::ClientContext v1_context;
    v1::EmbedResponse v1_response;
    const grpc::Status v1_status = v1_->Embed(&v1_context, v1_request, &v1_response);
    EXPECT_FALSE(v1_status.ok()) << c.name;
    EXPECT_EQ(v2_status.error_code(), v1_status.error_code()) << c.name << ": " << v2_status.error_message();
    EXPECT_EQ(v2_status.error_message(), v1_status.error_message()) << c.name;
  }
  inference::ModelInferResponse response;
  const grpc::Status version = Infer([] {
    auto r = TextRequest("tiny-albert", {"x"});
    r.set_model_version("5");
    return r;
  }(), &response);
  EXPECT_EQ(version.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(version.error_message(), "model 'tiny-albert' has no version '5'; it serves version '1'");
  const grpc::Status unnamed = Infer(TextRequest("", {"x"}), &response);
  EXPECT_EQ(unnamed.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(unnamed.error_message(), HasSubstr("model_name is empty; loaded models: "));
  ExpectStillServing();
}

TEST_F(OpenInferenceTest, CallsAreCountedInTheRequestMetrics) {
  const std::string metadata_ok = "odeserve_requests_total{code=\"OK\",method=\"ModelMetadata\",model=\"\"}";
  const std::string refused = "odeserve_requests_total{code=\"INVALID_ARGUMENT\",method=\"ModelInfer\",model=\"\"}";
  // Served ModelInfer calls run through the core's Embed, counted under ModelInfer with their model.
  const std::string served = "odeserve_requests_total{code=\"OK\",method=\"ModelInfer\",model=\"tiny-albert\"}";
  const std::string as_v1 = "odeserve_requests_total{code=\"OK\",method=\"Embed\",model=\"tiny-albert\"}";
  const std::string before = testing::HttpGet(server_->metrics_port(), "/metrics");
  inference::ModelMetadataResponse metadata;
  ASSERT_TRUE(Metadata("tiny-albert", &metadata).ok());
  inference::ModelInferResponse response;
  auto bad = TextRequest("tiny-albert", {"x"});
  bad.mutable_inputs(0)->set_datatype("INT8");
  ASSERT_EQ(Infer(bad, &response).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  ASSERT_TRUE(Infer(TextRequest("tiny-albert", {"x"}), &response).ok());
  const std::string after = testing::HttpGet(server_->metrics_port(), "/metrics");
  EXPECT_EQ(MetricValue(after, metadata_ok), MetricValue(before, metadata_ok) + 1) << after;
  EXPECT_EQ(MetricValue(after, refused), MetricValue(before, refused) + 1);
  EXPECT_EQ(MetricValue(after, served), MetricValue(before, served) + 1);
  EXPECT_EQ(MetricValue(after, as_v1), MetricValue(before, as_v1));
}

// --- lifecycle, each on its own server ------------------------------------------------------

TEST(OpenInferenceLifecycle, BearerTokensGuardEverythingButLiveAndReady) {
  const fs::path repo = MakeRepository();
  const fs::path tokens = repo / "tokens.txt";
  std::ofstream(tokens) << "# test\ns3cret\n";
  testing::ServerProcess server(ODESERVE_BINARY, repo, {"--auth_tokens_file=" + tokens.string()});
  ASSERT_TRUE(server.ok()) << server.log();
  auto stub = inference::GRPCInferenceService::NewStub(server.channel());
  const auto call = [&](const std::string& token, auto method, const auto& request, auto* response) {
    grpc::ClientContext context;
    if (!token.empty()) context.AddMetadata("authorization", "Bearer " + token);
    return (stub.get()->*method)(&context, request, response);
  };
  inference::ServerLiveResponse live;
  EXPECT_TRUE(call("", &inference::GRPCInferenceService::Stub::ServerLive, inference::ServerLiveRequest(), &live).ok());
  inference::ServerReadyResponse ready;
  EXPECT_TRUE(call("", &inference::GRPCInferenceService::Stub::ServerReady, inference::ServerReadyRequest(), &ready).ok());
  EXPECT_TRUE(ready.ready());
  inference::ModelInferResponse response;
  const auto request = TextRequest("tiny-albert", {"guarded"});
  EXPECT_EQ(call("", &inference::GRPCInferenceService::Stub::ModelInfer, request, &response).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(call("wrong", &inference::GRPCInferenceService::Stub::ModelInfer, request, &response).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_TRUE(call("s3cret", &inference::GRPCInferenceService::Stub::ModelInfer, request, &response).ok());
  inference::ModelMetadataRequest metadata_request;
  metadata_request.set_name("tiny-albert");
  inference::ModelMetadataResponse metadata;
  EXPECT_EQ(call("", &inference::GRPCInferenceService::Stub::ModelMetadata, metadata_request, &metadata).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  inference::ServerMetadataResponse server_metadata;
  EXPECT_EQ(call("", &inference::GRPCInferenceService::Stub::ServerMetadata, inference::ServerMetadataRequest(),
                 &server_metadata).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  inference::ModelReadyRequest model_ready;
  model_ready.set_name("tiny-albert");
  inference::ModelReadyResponse model_ready_response;
  EXPECT_EQ(call("", &inference::GRPCInferenceService::Stub::ModelReady, model_ready, &model_ready_response).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(server.Terminate(), 0) << server.log();
  std::error_code ec;
  fs::remove_all(repo, ec);
}

// Readiness needs a READY model, as health's odeserve.v1.Inference does: a server whose only
// model failed to load is live, not ready, and that model is not ready either.
TEST(OpenInferenceLifecycle, WithNoModelReadyTheServerIsLiveButNotReady) {
  const fs::path repo = MakeRepository();
  testing::RemoveModelsExcept(repo, "broken-classifier");
  testing::ServerProcess server(ODESERVE_BINARY, repo);
  ASSERT_TRUE(server.ok()) << server.log();
  auto stub = inference::GRPCInferenceService::NewStub(server.channel());
  grpc::ClientContext live_context, ready_context, model_context;
  inference::ServerLiveResponse live;
  ASSERT_TRUE(stub->ServerLive(&live_context, {}, &live).ok());
  EXPECT_TRUE(live.live());
  inference::ServerReadyResponse ready;
  ready.set_ready(true);
  ASSERT_TRUE(stub->ServerReady(&ready_context, {}, &ready).ok());
  EXPECT_FALSE(ready.ready());
  inference::ModelReadyRequest model_request;
  model_request.set_name("broken-classifier");
  inference::ModelReadyResponse model_ready;
  model_ready.set_ready(true);
  ASSERT_TRUE(stub->ModelReady(&model_context, model_request, &model_ready).ok());
  EXPECT_FALSE(model_ready.ready());
  EXPECT_EQ(server.Terminate(), 0) << server.log();
  std::error_code ec;
  fs::remove_all(repo, ec);
}

// TLS belongs to the port: the v2 service is served over it as v1 is, and a plaintext client
// gets nothing.
TEST(OpenInferenceLifecycle, TlsServesV2AndAPlaintextClientGetsNothing) {
  const fs::path repo = MakeRepository();
  const fs::path cert = repo / "cert.pem", key = repo / "key.pem";
  const std::string make = "openssl req -x509 -newkey rsa:2048 -nodes -keyout " + key.string() + " -out " +
                           cert.string() + " -days 2 -subj /CN=localhost -addext subjectAltName=DNS:localhost "
                           ">/dev/null 2>&1";
  ASSERT_EQ(std::system(make.c_str()), 0) << "openssl could not make a certificate";
  testing::ServerProcess server(ODESERVE_BINARY, repo, {"--tls_cert=" + cert.string(), "--tls_key=" + key.string()});
  ASSERT_TRUE(server.ok()) << server.log();
  grpc::SslCredentialsOptions ssl;
  std::ifstream pem(cert);
  ssl.pem_root_certs.assign(std::istreambuf_iterator<char>(pem), std::istreambuf_iterator<char>());
  grpc::ChannelArguments arguments;
  arguments.SetSslTargetNameOverride("localhost");
  auto tls = inference::GRPCInferenceService::NewStub(
      grpc::CreateCustomChannel(server.address(), grpc::SslCredentials(ssl), arguments));
  grpc::ClientContext live_context;
  inference::ServerLiveResponse live;
  ASSERT_TRUE(tls->ServerLive(&live_context, {}, &live).ok()) << server.log();
  EXPECT_TRUE(live.live());
  grpc::ClientContext infer_context;
  inference::ModelInferResponse response;
  const grpc::Status status = tls->ModelInfer(&infer_context, TextRequest("tiny-albert", {"over TLS"}), &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  ASSERT_EQ(response.outputs_size(), 1);
  EXPECT_EQ(response.outputs(0).name(), "embedding");

  auto plaintext = inference::GRPCInferenceService::NewStub(server.channel());
  grpc::ClientContext plain_context;
  plain_context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
  EXPECT_FALSE(plaintext->ServerLive(&plain_context, {}, &live).ok());
  EXPECT_EQ(server.Terminate(), 0) << server.log();
  std::error_code ec;
  fs::remove_all(repo, ec);
}

TEST(OpenInferenceLifecycle, SigtermDrainsAModelInferThenLiveAndReadyTurnFalse) {
  const fs::path repo = MakeRepository();
  testing::ServerProcess server(ODESERVE_BINARY, repo);
  ASSERT_TRUE(server.ok()) << server.log();
  auto stub = inference::GRPCInferenceService::NewStub(server.channel());
  auto in_flight = std::async(std::launch::async, [&] {
    grpc::ClientContext context;
    inference::ModelInferResponse response;
    return stub->ModelInfer(&context, TextRequest("slow-queue", {"in flight during shutdown"}), &response);
  });
  // SIGTERM once the core counts the call in flight (what the drain waits on).
  const auto wait_until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (testing::HttpGet(server.metrics_port(), "/metrics").find("odeserve_requests_in_flight{model=\"slow-queue\"} 1\n") ==
         std::string::npos) {
    ASSERT_LT(std::chrono::steady_clock::now(), wait_until) << server.log();
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  kill(server.pid(), SIGTERM);
  inference::ServerReadyResponse ready;
  ready.set_ready(true);
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::milliseconds(900);
  do {
    grpc::ClientContext context;
    ASSERT_TRUE(stub->ServerReady(&context, {}, &ready).ok());
    if (!ready.ready()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  } while (std::chrono::steady_clock::now() < give_up);
  EXPECT_FALSE(ready.ready());
  grpc::ClientContext live_context;
  inference::ServerLiveResponse live;
  ASSERT_TRUE(stub->ServerLive(&live_context, {}, &live).ok());
  EXPECT_FALSE(live.live()) << "follows health \"\": NOT_SERVING once the drain starts";
  inference::ModelInferResponse late;
  grpc::ClientContext late_context;
  EXPECT_EQ(stub->ModelInfer(&late_context, TextRequest("tiny-albert", {"too late"}), &late).error_code(),
            grpc::StatusCode::UNAVAILABLE);
  EXPECT_TRUE(in_flight.get().ok()) << "the in-flight call finishes";
  EXPECT_EQ(server.Terminate(), 0) << server.log();
  std::error_code ec;
  fs::remove_all(repo, ec);
}

}  // namespace
}  // namespace odeserve
