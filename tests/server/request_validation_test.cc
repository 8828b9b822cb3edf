// core/request_validation: every refusal of the README's error table that depends only on the
// request and the model's config, one test each, with the message that names the field and
// the limit. The other rows are tested where their check lives:
//  - unknown model (NOT_FOUND), a model that failed to load: InferenceCoreTest (real models);
//  - input over its byte limit: input_limits_test.cc; over max_sequence_length tokens:
//    tokenizer_test.cc and e2e; work over --max_call_work: work_limit_test.cc;
//  - more inputs than the queue holds, queue full: scheduler_test.cc; a full tokenization
//    queue: InferenceCoreTest; budgets under REFUSE and deadlines: scheduler_test.cc and e2e;
//  - starting, draining, exit (UNAVAILABLE), bearer tokens (UNAUTHENTICATED), malformed
//    protobuf: the e2e suites.

#include "server/core/request_validation.h"

#include <cmath>
#include <limits>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace odeserve::core {
namespace {

using ::testing::HasSubstr;

v1::ModelConfig Encoder() {
  v1::ModelConfig config;
  config.set_name("enc");
  config.set_task(v1::EMBEDDING);
  config.set_max_inputs_per_request(4);
  config.mutable_steps()->set_min(1);
  config.mutable_steps()->set_max(16);
  config.add_solvers(v1::EULER);
  config.add_solvers(v1::HEUN);
  return config;
}

v1::ModelConfig Translator() {
  v1::ModelConfig config = Encoder();
  config.set_name("mt");
  config.set_task(v1::TRANSLATION);
  auto* t = config.mutable_translation();
  t->mutable_decoder_steps()->set_min(1);
  t->mutable_decoder_steps()->set_max(12);
  t->set_max_beam_size(8);
  t->set_max_output_tokens(128);
  t->set_length_penalty(1.2f);
  return config;
}

google::protobuf::RepeatedPtrField<std::string> Inputs(std::initializer_list<std::string> texts) {
  google::protobuf::RepeatedPtrField<std::string> inputs;
  for (const auto& text : texts) *inputs.Add() = text;
  return inputs;
}

v1::ComputeOptions Compute(int steps = 0, int min_steps = 0) {
  v1::ComputeOptions compute;
  compute.set_steps(steps);
  compute.set_min_steps(min_steps);
  return compute;
}

// An INVALID_ARGUMENT whose message holds every one of `parts`.
void ExpectRefused(const absl::Status& status, std::initializer_list<const char*> parts) {
  EXPECT_TRUE(absl::IsInvalidArgument(status)) << status;
  for (const char* part : parts) EXPECT_THAT(std::string(status.message()), HasSubstr(part));
}

TEST(RequestValidation, ValidRequestsPass) {
  EXPECT_TRUE(ValidateInputs(Encoder(), Inputs({"a", "b c", "ü"})).ok());
  EXPECT_TRUE(ValidateCompute(Encoder(), Compute(16, 16)).ok());
  v1::ComputeOptions compute = Compute();
  compute.set_solver(v1::HEUN);
  compute.set_on_budget_miss(v1::REFUSE);
  compute.mutable_latency_budget()->set_nanos(1);
  EXPECT_TRUE(ValidateCompute(Encoder(), compute).ok());
  v1::ComputeOptions decoder = Compute(2);
  decoder.set_decoder_steps(12);
  EXPECT_TRUE(ValidateCompute(Translator(), decoder).ok());
  EXPECT_TRUE(ValidateDecode(Translator(), decoder, {8, 128, 4.0f}).ok());
  EXPECT_TRUE(ValidateDecode(Translator(), Compute(), {0, 0, 0.0f}).ok());
  EXPECT_TRUE(ValidateTopK(0).ok());
  EXPECT_TRUE(CheckTask(Encoder(), v1::EMBEDDING, "Embed").ok());
}

TEST(RequestValidation, AnEmptyInputListIsRefused) {
  ExpectRefused(ValidateInputs(Encoder(), Inputs({})), {"inputs is empty", "between 1 and 4"});
}

TEST(RequestValidation, AnEmptyTextIsRefusedNamingIt) {
  ExpectRefused(ValidateInputs(Encoder(), Inputs({"a", ""})), {"inputs[1] is empty"});
}

TEST(RequestValidation, MoreInputsThanMaxInputsPerRequestAreRefused) {
  ExpectRefused(ValidateInputs(Encoder(), Inputs({"a", "b", "c", "d", "e"})),
                {"inputs has 5 strings", "model 'enc'", "at most 4", "max_inputs_per_request"});
}

TEST(RequestValidation, TextThatIsNotUtf8IsRefusedNamingIt) {
  ExpectRefused(ValidateInputs(Encoder(), Inputs({"ok", "bad \xC3\x28"})), {"inputs[1] is not valid UTF-8"});
  ExpectRefused(ValidateInputs(Encoder(), Inputs({"\xED\xA0\x80"})), {"inputs[0] is not valid UTF-8"});  // surrogate
}

TEST(RequestValidation, StepsOutsideTheModelsRangeAreRefused) {
  ExpectRefused(ValidateCompute(Encoder(), Compute(17)), {"compute.steps 17", "model 'enc'", "[1, 16]"});
  ExpectRefused(ValidateCompute(Encoder(), Compute(-1)), {"compute.steps -1", "[1, 16]"});
}

TEST(RequestValidation, MinStepsOutsideTheModelsRangeIsRefused) {
  ExpectRefused(ValidateCompute(Encoder(), Compute(0, 17)), {"compute.min_steps 17", "[0, 16]"});
  ExpectRefused(ValidateCompute(Encoder(), Compute(0, -1)), {"compute.min_steps -1", "[0, 16]"});
}

TEST(RequestValidation, MinStepsAboveTheCallsExplicitStepsIsRefused) {
  ExpectRefused(ValidateCompute(Encoder(), Compute(2, 3)), {"compute.min_steps 3 is above compute.steps 2"});
  v1::ComputeOptions compute = Compute(0, 5);
  compute.set_decoder_steps(4);
  ExpectRefused(ValidateDecode(Translator(), compute, {}), {"compute.min_steps 5 is above compute.decoder_steps 4"});
}

TEST(RequestValidation, AnUnknownSolverIsRefused) {
  v1::ComputeOptions compute = Compute();
  compute.set_solver(static_cast<v1::Solver>(99));
  ExpectRefused(ValidateCompute(Encoder(), compute), {"compute.solver 99 is not a known solver"});
}

TEST(RequestValidation, ASolverTheModelDoesNotAllowIsRefusedListingTheAllowedOnes) {
  v1::ComputeOptions compute = Compute();
  compute.set_solver(v1::RK4);
  ExpectRefused(ValidateCompute(Encoder(), compute), {"compute.solver RK4 is not allowed by model 'enc'",
                                                      "allowed: EULER, HEUN"});
}

TEST(RequestValidation, AnUnknownBudgetMissPolicyIsRefused) {
  v1::ComputeOptions compute = Compute();
  compute.set_on_budget_miss(static_cast<v1::BudgetMissPolicy>(7));
  ExpectRefused(ValidateCompute(Encoder(), compute), {"compute.on_budget_miss 7 is not a known policy"});
}

TEST(RequestValidation, ABudgetThatIsNotPositiveIsRefused) {
  for (auto [seconds, nanos] : {std::pair<int64_t, int32_t>{0, 0}, {-1, 0}, {0, -5}, {1, 1000000000}}) {
    v1::ComputeOptions compute = Compute();
    compute.mutable_latency_budget()->set_seconds(seconds);
    compute.mutable_latency_budget()->set_nanos(nanos);
    ExpectRefused(ValidateCompute(Encoder(), compute), {"compute.latency_budget must be > 0"});
  }
}

TEST(RequestValidation, DecoderStepsOnAnEncoderModelAreRefused) {
  v1::ComputeOptions compute = Compute();
  compute.set_decoder_steps(2);
  ExpectRefused(ValidateCompute(Encoder(), compute),
                {"compute.decoder_steps is only for translation models", "model 'enc' has no decoder"});
}

TEST(RequestValidation, DecoderStepsOutsideTheDecodersRangeAreRefused) {
  v1::ComputeOptions compute = Compute();
  compute.set_decoder_steps(13);
  ExpectRefused(ValidateDecode(Translator(), compute, {}), {"compute.decoder_steps 13", "model 'mt'", "[1, 12]"});
}

TEST(RequestValidation, MinStepsAboveTheDecodersRangeIsRefused) {
  ExpectRefused(ValidateDecode(Translator(), Compute(0, 13), {}),
                {"compute.min_steps 13 is above model 'mt' decoder step range [1, 12]"});
}

TEST(RequestValidation, ABeamAboveMaxBeamSizeIsRefused) {
  ExpectRefused(ValidateDecode(Translator(), Compute(), {9, 0, 0.0f}), {"beam_size 9", "[0, 8]", "max_beam_size"});
  ExpectRefused(ValidateDecode(Translator(), Compute(), {-1, 0, 0.0f}), {"beam_size -1"});
}

TEST(RequestValidation, MaxOutputTokensAboveTheModelsLimitIsRefused) {
  ExpectRefused(ValidateDecode(Translator(), Compute(), {0, 129, 0.0f}), {"max_output_tokens 129", "[0, 128]"});
  ExpectRefused(ValidateDecode(Translator(), Compute(), {0, -1, 0.0f}), {"max_output_tokens -1"});
}

TEST(RequestValidation, ALengthPenaltyOutsideZeroToFourIsRefused) {
  for (float penalty : {-0.5f, 4.5f, std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
    ExpectRefused(ValidateDecode(Translator(), Compute(), {0, 0, penalty}), {"length_penalty", "outside [0, 4]"});
  }
}

TEST(RequestValidation, ANegativeTopKIsRefused) {
  ExpectRefused(ValidateTopK(-1), {"top_k must be >= 0, got -1"});
}

TEST(RequestValidation, AModelOfAnotherTaskIsFailedPreconditionNamingTheRightMethod) {
  const absl::Status status = CheckTask(Encoder(), v1::CLASSIFICATION, "Classify");
  EXPECT_TRUE(absl::IsFailedPrecondition(status)) << status;
  EXPECT_THAT(std::string(status.message()),
              HasSubstr("model 'enc' is a EMBEDDING model and cannot serve Classify; call Embed instead"));
}

}  // namespace
}  // namespace odeserve::core
