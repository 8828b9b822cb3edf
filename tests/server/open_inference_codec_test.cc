// rpc/open_inference_codec: Open Inference Protocol (v2) tensors and parameters <-> odeserve.v1
// requests and responses, without a server.

#include "server/rpc/open_inference_codec.h"

#include <cstring>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/common/infer_parameters.h"

namespace odeserve::rpc::oip {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

v1::ModelInfo Model(v1::Task task) {
  v1::ModelInfo model;
  model.set_name("m");
  model.set_version("3");
  model.set_task(task);
  model.set_state(v1::READY);
  model.set_embedding_dimension(2);
  for (const char* label : {"libs", "python", "games"}) model.add_labels(label);
  return model;
}

// A request with one `text` tensor whose texts travel in contents.bytes_contents.
inference::ModelInferRequest TextRequest(std::vector<std::string> texts) {
  inference::ModelInferRequest request;
  request.set_model_name("m");
  auto* input = request.add_inputs();
  input->set_name("text");
  input->set_datatype("BYTES");
  input->add_shape(static_cast<int64_t>(texts.size()));
  for (auto& text : texts) input->mutable_contents()->add_bytes_contents(text);
  return request;
}

// The same texts in raw_input_contents.
inference::ModelInferRequest RawTextRequest(const std::vector<std::string>& texts) {
  inference::ModelInferRequest request = TextRequest({});
  request.mutable_inputs(0)->set_shape(0, static_cast<int64_t>(texts.size()));
  request.add_raw_input_contents(EncodeRawBytes(texts));
  return request;
}

using odeserve::testing::Bool;
using odeserve::testing::Double;
using odeserve::testing::Int;
using odeserve::testing::Str;

void ExpectInvalid(const absl::Status& status, const std::string& part) {
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_THAT(std::string(status.message()), HasSubstr(part));
}

// --- raw BYTES -------------------------------------------------------------------------------

TEST(RawBytes, RoundTripsWithLittleEndianLengthPrefixes) {
  const std::string raw = EncodeRawBytes({"ab", "", "Grüße"});
  ASSERT_EQ(raw.size(), 4 + 2 + 4 + 0 + 4 + 7u);
  EXPECT_EQ(raw.substr(0, 4), std::string("\x02\x00\x00\x00", 4));
  EXPECT_EQ(raw.substr(6, 4), std::string("\x00\x00\x00\x00", 4));
  auto parsed = ParseRawBytes(raw, "t");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_THAT(*parsed, ElementsAre("ab", "", "Grüße"));
  EXPECT_TRUE(ParseRawBytes("", "t")->empty());
}

TEST(RawBytes, LengthAbove255UsesTheHigherBytes) {
  const std::string long_text(300, 'x');
  const std::string raw = EncodeRawBytes({long_text});
  EXPECT_EQ(raw.substr(0, 4), std::string("\x2c\x01\x00\x00", 4));
  EXPECT_EQ(ParseRawBytes(raw, "t")->at(0), long_text);
}

TEST(RawBytes, TruncatedLengthPrefixIsRefusedNamingTheTensor) {
  std::string raw = EncodeRawBytes({"abc"});
  raw += std::string("\x05\x00", 2);  // half a length prefix
  const auto parsed = ParseRawBytes(raw, "raw_input_contents[0] (input 'text')");
  ExpectInvalid(parsed.status(), "raw_input_contents[0] (input 'text') is truncated: element 1 at byte 7 needs a "
                                 "4-byte length prefix, but 2 bytes are left");
}

TEST(RawBytes, LengthPastTheEndIsRefused) {
  const std::string raw = std::string("\x0a\x00\x00\x00", 4) + "short";
  ExpectInvalid(ParseRawBytes(raw, "x").status(), "x is truncated: element 0 declares 10 bytes at byte 4, but 5 bytes are left");
  // A length near 2^32 must not wrap around.
  ExpectInvalid(ParseRawBytes(std::string("\xff\xff\xff\xff", 4) + "a", "x").status(), "declares 4294967295 bytes");
}

TEST(RawFp32, IsLittleEndianIeee) {
  const std::string raw = EncodeRawFp32({1.0f, -2.5f});
  ASSERT_EQ(raw.size(), 8u);
  EXPECT_EQ(raw.substr(0, 4), std::string("\x00\x00\x80\x3f", 4));
  EXPECT_EQ(raw.substr(4, 4), std::string("\x00\x00\x20\xc0", 4));
}

// --- the text input --------------------------------------------------------------------------

TEST(DecodeTextInput, ReadsBytesContentsAndRawContents) {
  auto typed = DecodeTextInput(TextRequest({"a", "b c"}));
  ASSERT_TRUE(typed.ok()) << typed.status();
  EXPECT_THAT(*typed, ElementsAre("a", "b c"));
  auto raw = DecodeTextInput(RawTextRequest({"a", "b c"}));
  ASSERT_TRUE(raw.ok()) << raw.status();
  EXPECT_THAT(*raw, ElementsAre("a", "b c"));
}

TEST(DecodeTextInput, EveryBadTensorNamesItsFault) {
  inference::ModelInferRequest missing = TextRequest({"a"});
  missing.clear_inputs();
  ExpectInvalid(DecodeTextInput(missing).status(), "input tensor 'text' is missing");

  inference::ModelInferRequest renamed = TextRequest({"a"});
  renamed.mutable_inputs(0)->set_name("INPUT0");
  ExpectInvalid(DecodeTextInput(renamed).status(), "unknown input tensor 'INPUT0'");

  inference::ModelInferRequest twice = TextRequest({"a"});
  *twice.add_inputs() = twice.inputs(0);
  ExpectInvalid(DecodeTextInput(twice).status(), "input tensor 'text' is given more than once");

  inference::ModelInferRequest fp32 = TextRequest({"a"});
  fp32.mutable_inputs(0)->set_datatype("FP32");
  ExpectInvalid(DecodeTextInput(fp32).status(), "input 'text' has datatype 'FP32'; expected BYTES");

  inference::ModelInferRequest rank2 = TextRequest({"a", "b"});
  rank2.mutable_inputs(0)->set_shape(0, 1);
  rank2.mutable_inputs(0)->add_shape(2);
  ExpectInvalid(DecodeTextInput(rank2).status(), "input 'text' has shape [1, 2] (rank 2); expected rank 1: [N]");

  inference::ModelInferRequest scalar = TextRequest({"a"});
  scalar.mutable_inputs(0)->clear_shape();
  ExpectInvalid(DecodeTextInput(scalar).status(), "(rank 0)");

  inference::ModelInferRequest negative = TextRequest({"a"});
  negative.mutable_inputs(0)->set_shape(0, -1);
  ExpectInvalid(DecodeTextInput(negative).status(), "dimensions must be >= 0");

  inference::ModelInferRequest count = TextRequest({"a", "b"});
  count.mutable_inputs(0)->set_shape(0, 3);
  ExpectInvalid(DecodeTextInput(count).status(), "input 'text' has shape [3] but 2 elements");

  inference::ModelInferRequest raw_count = RawTextRequest({"a", "b"});
  raw_count.mutable_inputs(0)->set_shape(0, 1);
  ExpectInvalid(DecodeTextInput(raw_count).status(), "input 'text' has shape [1] but 2 elements");

  inference::ModelInferRequest both = RawTextRequest({"a"});
  both.mutable_inputs(0)->mutable_contents()->add_bytes_contents("a");
  ExpectInvalid(DecodeTextInput(both).status(), "sets contents while the request sends raw_input_contents");

  inference::ModelInferRequest extra_raw = RawTextRequest({"a"});
  extra_raw.add_raw_input_contents("");
  ExpectInvalid(DecodeTextInput(extra_raw).status(), "raw_input_contents has 2 entries for 1 input tensors");

  inference::ModelInferRequest truncated = RawTextRequest({"abc"});
  truncated.mutable_raw_input_contents(0)->pop_back();
  ExpectInvalid(DecodeTextInput(truncated).status(), "raw_input_contents[0] (input 'text') is truncated");

  inference::ModelInferRequest typed_numbers = TextRequest({});
  typed_numbers.mutable_inputs(0)->set_shape(0, 1);
  typed_numbers.mutable_inputs(0)->mutable_contents()->add_fp32_contents(1.0f);
  ExpectInvalid(DecodeTextInput(typed_numbers).status(), "input 'text' is BYTES but sets contents.fp32_contents");

  inference::ModelInferRequest bad_utf8 = TextRequest({"ok", std::string("\xc3\x28", 2)});
  ExpectInvalid(DecodeTextInput(bad_utf8).status(), "input 'text' element 1 is not valid UTF-8");
  ExpectInvalid(DecodeTextInput(RawTextRequest({std::string("\xff", 1)})).status(), "element 0 is not valid UTF-8");

  inference::ModelInferRequest tensor_parameter = TextRequest({"a"});
  (*tensor_parameter.mutable_inputs(0)->mutable_parameters())["binary_data_size"] = Int(5);
  ExpectInvalid(DecodeTextInput(tensor_parameter).status(), "input 'text': unknown parameter 'binary_data_size'");
}

TEST(DecodeTextInput, EmptyTensorAndEmptyTextsAreLeftToTheCore) {
  // The core refuses them with v1's messages ("inputs is empty", "inputs[1] is empty").
  EXPECT_TRUE(DecodeTextInput(TextRequest({})).ok());
  EXPECT_TRUE(DecodeTextInput(TextRequest({"a", ""})).ok());
}

// --- parameters ------------------------------------------------------------------------------

TEST(ToV1Call, MapsEveryComputeParameter) {
  inference::ModelInferRequest request = TextRequest({"x"});
  auto& p = *request.mutable_parameters();
  p["steps"] = Int(3);
  p["min_steps"] = Int(2);
  p["solver"] = Str("HEUN");
  p["latency_budget_us"] = Int(2500000);
  p["on_budget_miss"] = Str("refuse");
  p["truncate"] = Bool(true);
  p["normalize"] = Bool(true);
  request.set_id("req-7");
  auto call = ToV1Call(request, Model(v1::EMBEDDING));
  ASSERT_TRUE(call.ok()) << call.status();
  const auto& embed = std::get<v1::EmbedRequest>(call->request);
  EXPECT_EQ(embed.model(), "m");
  EXPECT_THAT(embed.inputs(), ElementsAre("x"));
  EXPECT_EQ(embed.compute().steps(), 3);
  EXPECT_EQ(embed.compute().min_steps(), 2);
  EXPECT_EQ(embed.compute().solver(), v1::HEUN);
  EXPECT_EQ(embed.compute().latency_budget().seconds(), 2);
  EXPECT_EQ(embed.compute().latency_budget().nanos(), 500000000);
  EXPECT_EQ(embed.compute().on_budget_miss(), v1::REFUSE);
  EXPECT_TRUE(embed.truncate());
  EXPECT_TRUE(embed.normalize());
  EXPECT_EQ(call->id, "req-7");
  EXPECT_THAT(call->outputs, ElementsAre("embedding"));
  EXPECT_FALSE(call->raw_output);
}

TEST(ToV1Call, MapsTranslationAndClassificationParameters) {
  inference::ModelInferRequest request = TextRequest({"x"});
  auto& p = *request.mutable_parameters();
  p["decoder_steps"] = Int(2);
  p["beam_size"] = Int(4);
  p["max_output_tokens"] = Int(20);
  p["length_penalty"] = Double(1.5);
  p["solver"] = Str("rk4");
  p["on_budget_miss"] = Str("serve_floor");
  auto translate = ToV1Call(request, Model(v1::TRANSLATION));
  ASSERT_TRUE(translate.ok()) << translate.status();
  const auto& t = std::get<v1::TranslateRequest>(translate->request);
  EXPECT_EQ(t.compute().decoder_steps(), 2);
  EXPECT_EQ(t.beam_size(), 4);
  EXPECT_EQ(t.max_output_tokens(), 20);
  EXPECT_FLOAT_EQ(t.length_penalty(), 1.5f);
  EXPECT_EQ(t.compute().solver(), v1::RK4);
  EXPECT_EQ(t.compute().on_budget_miss(), v1::SERVE_FLOOR);
  EXPECT_THAT(translate->outputs, ElementsAre("translation", "score"));

  inference::ModelInferRequest classify = TextRequest({"x"});
  (*classify.mutable_parameters())["top_k"] = Int(2);
  auto c = ToV1Call(classify, Model(v1::CLASSIFICATION));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->top_k, 2);
  // Every label's probability is asked of v1, whatever top_k.
  EXPECT_EQ(std::get<v1::ClassifyRequest>(c->request).top_k(), 3);
  (*classify.mutable_parameters())["top_k"] = Int(50);
  EXPECT_EQ(ToV1Call(classify, Model(v1::CLASSIFICATION))->top_k, 3) << "capped at the labels, as v1";
  (*classify.mutable_parameters())["top_k"] = Int(0);
  EXPECT_EQ(ToV1Call(classify, Model(v1::CLASSIFICATION))->top_k, 1) << "0 = 1, as v1";
}

TEST(ToV1Call, DecoderStepsOnAnEncoderIsLeftToTheCoreForV1sMessage) {
  inference::ModelInferRequest request = TextRequest({"x"});
  (*request.mutable_parameters())["decoder_steps"] = Int(2);
  auto call = ToV1Call(request, Model(v1::EMBEDDING));
  ASSERT_TRUE(call.ok());
  EXPECT_EQ(std::get<v1::EmbedRequest>(call->request).compute().decoder_steps(), 2);
}

TEST(ToV1Call, ParameterErrorsNameTheParameter) {
  const auto with = [](const std::string& name, inference::InferParameter value) {
    inference::ModelInferRequest request = TextRequest({"x"});
    (*request.mutable_parameters())[name] = std::move(value);
    return request;
  };
  const v1::ModelInfo embed = Model(v1::EMBEDDING);
  ExpectInvalid(ToV1Call(with("stepz", Int(1)), embed).status(),
                "unknown parameter 'stepz'; model 'm' (EMBEDDING) takes steps, min_steps, solver");
  ExpectInvalid(ToV1Call(with("steps", Str("3")), embed).status(),
                "parameter 'steps' must be an integer (int64_param), got string_param");
  ExpectInvalid(ToV1Call(with("steps", Double(3)), embed).status(), "got double_param");
  ExpectInvalid(ToV1Call(with("steps", inference::InferParameter()), embed).status(), "got no value");
  ExpectInvalid(ToV1Call(with("steps", Int(int64_t{1} << 40)), embed).status(),
                "parameter 'steps' 1099511627776 is outside the 32-bit integer range");
  ExpectInvalid(ToV1Call(with("normalize", Int(1)), embed).status(),
                "parameter 'normalize' must be a bool (bool_param), got int64_param");
  ExpectInvalid(ToV1Call(with("solver", Int(2)), embed).status(), "parameter 'solver' must be a string");
  ExpectInvalid(ToV1Call(with("solver", Str("midpoint")), embed).status(),
                "parameter 'solver' is 'midpoint'; expected euler, heun or rk4");
  ExpectInvalid(ToV1Call(with("on_budget_miss", Str("wait")), embed).status(),
                "parameter 'on_budget_miss' is 'wait'; expected serve_floor or refuse");
  ExpectInvalid(ToV1Call(with("latency_budget_us", Str("5ms")), embed).status(),
                "parameter 'latency_budget_us' must be an integer");
  ExpectInvalid(ToV1Call(with("top_k", Int(2)), embed).status(),
                "parameter 'top_k' is only for CLASSIFICATION models; model 'm' is EMBEDDING");
  ExpectInvalid(ToV1Call(with("beam_size", Int(2)), Model(v1::CLASSIFICATION)).status(),
                "parameter 'beam_size' is only for TRANSLATION models");
  ExpectInvalid(ToV1Call(with("top_k", Int(-1)), Model(v1::CLASSIFICATION)).status(), "top_k must be >= 0, got -1");
  ExpectInvalid(ToV1Call(with("length_penalty", Str("1")), Model(v1::TRANSLATION)).status(),
                "parameter 'length_penalty' must be a number (double_param), got string_param");
  ExpectInvalid(ToV1Call(with("binary_data_output", Int(1)), embed).status(),
                "parameter 'binary_data_output' must be a bool (bool_param), got int64_param");
}

TEST(ToV1Call, UnsignedIntegersAreAccepted) {
  inference::ModelInferRequest request = TextRequest({"x"});
  inference::InferParameter steps;
  steps.set_uint64_param(5);
  (*request.mutable_parameters())["steps"] = steps;
  auto call = ToV1Call(request, Model(v1::EMBEDDING));
  ASSERT_TRUE(call.ok()) << call.status();
  EXPECT_EQ(std::get<v1::EmbedRequest>(call->request).compute().steps(), 5);
}

TEST(ToV1Call, LatencyBudgetKeepsItsSignForTheCoresCheck) {
  inference::ModelInferRequest request = TextRequest({"x"});
  (*request.mutable_parameters())["latency_budget_us"] = Int(-1500000);
  auto call = ToV1Call(request, Model(v1::EMBEDDING));
  ASSERT_TRUE(call.ok());
  const auto& budget = std::get<v1::EmbedRequest>(call->request).compute().latency_budget();
  EXPECT_EQ(budget.seconds(), -1);
  EXPECT_EQ(budget.nanos(), -500000000);
}

// --- outputs ---------------------------------------------------------------------------------

TEST(ToV1Call, OutputSelectionAndItsErrors) {
  inference::ModelInferRequest request = TextRequest({"x"});
  request.add_outputs()->set_name("label");
  auto call = ToV1Call(request, Model(v1::CLASSIFICATION));
  ASSERT_TRUE(call.ok()) << call.status();
  EXPECT_THAT(call->outputs, ElementsAre("label"));

  request.add_outputs()->set_name("label");
  ExpectInvalid(ToV1Call(request, Model(v1::CLASSIFICATION)).status(), "output 'label' is requested more than once");
  request.mutable_outputs(1)->set_name("logits");
  ExpectInvalid(ToV1Call(request, Model(v1::CLASSIFICATION)).status(),
                "unknown output 'logits'; model 'm' produces probabilities, label");
  request.mutable_outputs()->RemoveLast();
  (*request.mutable_outputs(0)->mutable_parameters())["classification"] = Int(2);
  ExpectInvalid(ToV1Call(request, Model(v1::CLASSIFICATION)).status(),
                "output 'label': unknown parameter 'classification' (outputs take binary_data)");
}

TEST(ResolveRawOutput, FollowsTheRequestThenTheOutputsThenTheInputs) {
  inference::ModelInferRequest typed = TextRequest({"x"});
  EXPECT_FALSE(*ResolveRawOutput(typed));
  EXPECT_TRUE(*ResolveRawOutput(RawTextRequest({"x"}))) << "raw in, raw out (tritonclient reads FP32 only raw)";

  inference::ModelInferRequest asked = typed;
  (*asked.mutable_parameters())["binary_data_output"] = Bool(true);
  EXPECT_TRUE(*ResolveRawOutput(asked));
  inference::ModelInferRequest refused = RawTextRequest({"x"});
  (*refused.mutable_parameters())["binary_data_output"] = Bool(false);
  EXPECT_FALSE(*ResolveRawOutput(refused));

  inference::ModelInferRequest per_output = typed;
  auto* output = per_output.add_outputs();
  output->set_name("embedding");
  (*output->mutable_parameters())["binary_data"] = Bool(true);
  EXPECT_TRUE(*ResolveRawOutput(per_output));

  auto* other = per_output.add_outputs();
  other->set_name("label");
  (*other->mutable_parameters())["binary_data"] = Bool(false);
  ExpectInvalid(ResolveRawOutput(per_output).status(), "outputs mix binary_data true and false");
  (*other->mutable_parameters())["binary_data"] = Str("yes");
  ExpectInvalid(ResolveRawOutput(per_output).status(), "output 'label': parameter 'binary_data' must be a bool");
}

v1::ComputeReport Report() {
  v1::ComputeReport report;
  report.set_steps(3);
  report.set_solver(v1::HEUN);
  report.set_field_evaluations(6);
  report.mutable_queue_time()->set_nanos(1500000);
  report.mutable_compute_time()->set_seconds(1);
  report.mutable_compute_time()->set_nanos(2000);
  report.set_budget_set(true);
  report.mutable_budget()->set_nanos(50000000);
  report.set_budget_met(true);
  report.set_step_choice(v1::BUDGET_FLOOR);
  report.set_decoder_steps(2);
  return report;
}

TEST(ReportParameters, CarryTheComputeReport) {
  google::protobuf::Map<std::string, inference::InferParameter> p;
  ReportParameters(Report(), /*translation=*/false, &p);
  EXPECT_EQ(p["steps"].int64_param(), 3);
  EXPECT_EQ(p["solver"].string_param(), "heun");
  EXPECT_EQ(p["field_evaluations"].int64_param(), 6);
  EXPECT_EQ(p["queue_us"].int64_param(), 1500);
  EXPECT_EQ(p["compute_us"].int64_param(), 1000002);
  EXPECT_EQ(p["budget_us"].int64_param(), 50000);
  EXPECT_TRUE(p["budget_set"].bool_param());
  EXPECT_TRUE(p["budget_met"].bool_param());
  EXPECT_EQ(p["step_choice"].string_param(), "budget_floor");
  EXPECT_EQ(p.count("decoder_steps"), 0u);
  ReportParameters(Report(), /*translation=*/true, &p);
  EXPECT_EQ(p["decoder_steps"].int64_param(), 2);
}

std::vector<float> Fp32(const std::string& raw) {
  std::vector<float> values(raw.size() / 4);
  std::memcpy(values.data(), raw.data(), raw.size());  // the test host is little-endian
  return values;
}

TEST(Encode, EmbeddingIsAnNByDMatrixTypedOrRaw) {
  v1::EmbedResponse v1;
  for (const std::vector<float>& row : {std::vector<float>{1, 2}, std::vector<float>{3, 4}}) {
    v1.add_embeddings()->mutable_values()->Add(row.begin(), row.end());
  }
  *v1.mutable_report() = Report();
  auto call = ToV1Call(TextRequest({"a", "b"}), Model(v1::EMBEDDING));
  ASSERT_TRUE(call.ok());
  call->id = "id-1";
  inference::ModelInferResponse typed;
  EncodeEmbed(v1, *call, Model(v1::EMBEDDING), &typed);
  EXPECT_EQ(typed.model_name(), "m");
  EXPECT_EQ(typed.model_version(), "3");
  EXPECT_EQ(typed.id(), "id-1");
  ASSERT_EQ(typed.outputs_size(), 1);
  EXPECT_EQ(typed.outputs(0).name(), "embedding");
  EXPECT_EQ(typed.outputs(0).datatype(), "FP32");
  EXPECT_THAT(typed.outputs(0).shape(), ElementsAre(2, 2));
  EXPECT_THAT(typed.outputs(0).contents().fp32_contents(), ElementsAre(1, 2, 3, 4));
  EXPECT_EQ(typed.raw_output_contents_size(), 0);
  EXPECT_EQ(typed.parameters().at("steps").int64_param(), 3);

  call->raw_output = true;
  inference::ModelInferResponse raw;
  EncodeEmbed(v1, *call, Model(v1::EMBEDDING), &raw);
  ASSERT_EQ(raw.raw_output_contents_size(), 1);
  EXPECT_FALSE(raw.outputs(0).has_contents());
  EXPECT_THAT(Fp32(raw.raw_output_contents(0)), ElementsAre(1, 2, 3, 4));
}

TEST(Encode, ClassificationGivesProbabilitiesInLabelOrderAndTheBestLabels) {
  v1::ClassifyResponse v1;
  auto* result = v1.add_results();
  for (const auto& [label, score] : std::vector<std::pair<std::string, float>>{{"games", 0.5f}, {"libs", 0.3f}, {"python", 0.2f}}) {
    auto* l = result->add_labels();
    l->set_label(label);
    l->set_score(score);
  }
  auto call = ToV1Call(TextRequest({"a"}), Model(v1::CLASSIFICATION));
  ASSERT_TRUE(call.ok());
  inference::ModelInferResponse out;
  EncodeClassify(v1, *call, Model(v1::CLASSIFICATION), &out);
  ASSERT_EQ(out.outputs_size(), 2);
  EXPECT_EQ(out.outputs(0).name(), "probabilities");
  EXPECT_THAT(out.outputs(0).shape(), ElementsAre(1, 3));
  EXPECT_THAT(out.outputs(0).contents().fp32_contents(), ElementsAre(0.3f, 0.2f, 0.5f));
  EXPECT_EQ(out.outputs(1).name(), "label");
  EXPECT_EQ(out.outputs(1).datatype(), "BYTES");
  EXPECT_THAT(out.outputs(1).shape(), ElementsAre(1));
  EXPECT_THAT(out.outputs(1).contents().bytes_contents(), ElementsAre("games"));

  // top_k 2, only `label`, raw: [N, k] best first.
  inference::ModelInferRequest request = TextRequest({"a"});
  (*request.mutable_parameters())["top_k"] = Int(2);
  (*request.mutable_parameters())["binary_data_output"] = Bool(true);
  request.add_outputs()->set_name("label");
  call = ToV1Call(request, Model(v1::CLASSIFICATION));
  ASSERT_TRUE(call.ok()) << call.status();
  inference::ModelInferResponse top2;
  EncodeClassify(v1, *call, Model(v1::CLASSIFICATION), &top2);
  ASSERT_EQ(top2.outputs_size(), 1);
  EXPECT_THAT(top2.outputs(0).shape(), ElementsAre(1, 2));
  ASSERT_EQ(top2.raw_output_contents_size(), 1);
  EXPECT_THAT(*ParseRawBytes(top2.raw_output_contents(0), "label"), ElementsAre("games", "libs"));
}

TEST(Encode, TranslationGivesTextsAndScoresWithDecoderReport) {
  v1::TranslateResponse v1;
  v1.add_translations("Hallo");
  v1.add_scores(-0.25f);
  *v1.mutable_report() = Report();
  auto call = ToV1Call(TextRequest({"hello"}), Model(v1::TRANSLATION));
  ASSERT_TRUE(call.ok());
  inference::ModelInferResponse out;
  EncodeTranslate(v1, *call, Model(v1::TRANSLATION), &out);
  ASSERT_EQ(out.outputs_size(), 2);
  EXPECT_EQ(out.outputs(0).name(), "translation");
  EXPECT_THAT(out.outputs(0).contents().bytes_contents(), ElementsAre("Hallo"));
  EXPECT_EQ(out.outputs(1).name(), "score");
  EXPECT_THAT(out.outputs(1).contents().fp32_contents(), ElementsAre(-0.25f));
  EXPECT_EQ(out.parameters().at("decoder_steps").int64_param(), 2);
}

// --- metadata --------------------------------------------------------------------------------

TEST(ModelMetadata, DescribesTheTextInputAndTheTasksOutputs) {
  const auto embed = ModelMetadata(Model(v1::EMBEDDING));
  EXPECT_EQ(embed.name(), "m");
  EXPECT_THAT(embed.versions(), ElementsAre("3"));
  EXPECT_EQ(embed.platform(), "odeserve_torchscript");
  ASSERT_EQ(embed.inputs_size(), 1);
  EXPECT_EQ(embed.inputs(0).name(), "text");
  EXPECT_EQ(embed.inputs(0).datatype(), "BYTES");
  EXPECT_THAT(embed.inputs(0).shape(), ElementsAre(-1));
  ASSERT_EQ(embed.outputs_size(), 1);
  EXPECT_THAT(embed.outputs(0).shape(), ElementsAre(-1, 2));

  const auto classify = ModelMetadata(Model(v1::CLASSIFICATION));
  ASSERT_EQ(classify.outputs_size(), 2);
  EXPECT_EQ(classify.outputs(0).name(), "probabilities");
  EXPECT_THAT(classify.outputs(0).shape(), ElementsAre(-1, 3));
  EXPECT_EQ(classify.outputs(1).name(), "label");

  const auto translate = ModelMetadata(Model(v1::TRANSLATION));
  ASSERT_EQ(translate.outputs_size(), 2);
  EXPECT_EQ(translate.outputs(0).name(), "translation");
  EXPECT_EQ(translate.outputs(0).datatype(), "BYTES");
}

TEST(CheckServable, VersionAndFailedModels) {
  EXPECT_TRUE(CheckServable(Model(v1::EMBEDDING), "").ok());
  EXPECT_TRUE(CheckServable(Model(v1::EMBEDDING), "3").ok());
  const absl::Status other = CheckServable(Model(v1::EMBEDDING), "4");
  EXPECT_EQ(other.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(other.message(), "model 'm' has no version '4'; it serves version '3'");
  v1::ModelInfo failed;
  failed.set_name("b");
  failed.set_state(v1::FAILED);
  failed.set_error("config.pbtxt: trained_depth must be > 0");
  const absl::Status status = CheckServable(failed, "");
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(status.message(), "model 'b' is not serving: it failed to load: config.pbtxt: trained_depth must be > 0");
}

TEST(MissingModelName, ListsTheReadyModels) {
  v1::ListModelsResponse models;
  *models.add_models() = Model(v1::EMBEDDING);
  models.add_models()->set_name("broken");
  const absl::Status status = MissingModelName(models);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(), "model_name is empty; loaded models: m");
}

}  // namespace
}  // namespace odeserve::rpc::oip
