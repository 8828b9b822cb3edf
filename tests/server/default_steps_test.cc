// ResolveDefaultSteps: the steps of a call without steps or budget follow the quality profile
// (cheapest Euler point within quality_tolerance of the best) unless the config fixes them.

#include "server/repository/default_steps.h"

#include <filesystem>
#include <map>
#include <utility>

#include <gtest/gtest.h>

#include "server/repository/model_config.h"

namespace odeserve::repository {
namespace {

v1::ModelConfig Encoder(int trained_depth, int max_steps, double tolerance) {
  v1::ModelConfig config;
  config.set_task(v1::EMBEDDING);
  config.set_trained_depth(trained_depth);
  config.mutable_steps()->set_min(1);
  config.mutable_steps()->set_max(max_steps);
  config.set_quality_tolerance(tolerance);
  return config;
}

void AddPoint(v1::QualityProfile& profile, v1::Solver solver, int steps, const char* metric, double value,
              int decoder_steps = 0, int beam = 0) {
  auto* point = profile.add_points();
  point->set_solver(solver);
  point->set_steps(steps);
  point->set_metric(metric);
  point->set_value(value);
  point->set_decoder_steps(decoder_steps);
  point->set_beam_size(beam);
}

TEST(ResolveDefaultSteps, WithoutAProfileTheTrainedDepthRuns) {
  const DefaultSteps d = ResolveDefaultSteps(Encoder(12, 24, 0), v1::QualityProfile{});
  EXPECT_EQ(d.steps, 12);
  EXPECT_EQ(d.source, DefaultStepsSource::kTrainedDepth);
  EXPECT_EQ(DefaultStepsSourceName(d.source), "trained_depth");
}

TEST(ResolveDefaultSteps, AConfiguredDefaultIsKept) {
  v1::ModelConfig config = Encoder(8, 16, 0);
  config.mutable_steps()->set_default_steps(3);
  v1::QualityProfile profile;
  AddPoint(profile, v1::EULER, 1, "accuracy", 0.9);
  const DefaultSteps d = ResolveDefaultSteps(config, profile);
  EXPECT_EQ(d.steps, 3);
  EXPECT_EQ(d.source, DefaultStepsSource::kConfig);
}

TEST(ResolveDefaultSteps, TheCheapestEulerPointWithinToleranceOfTheBestOfThePrimaryMetric) {
  v1::QualityProfile profile;
  profile.set_primary_metric("accuracy");
  AddPoint(profile, v1::EULER, 1, "accuracy", 0.60);
  AddPoint(profile, v1::EULER, 2, "accuracy", 0.70);
  AddPoint(profile, v1::EULER, 4, "accuracy", 0.745);
  AddPoint(profile, v1::EULER, 8, "accuracy", 0.75);
  AddPoint(profile, v1::EULER, 16, "accuracy", 0.74);
  AddPoint(profile, v1::EULER, 2, "macro_f1", 0.99);  // not the primary metric
  AddPoint(profile, v1::RK4, 1, "accuracy", 0.80);    // calls default to Euler
  const DefaultSteps strict = ResolveDefaultSteps(Encoder(8, 16, 0), profile);
  EXPECT_EQ(strict.steps, 8);
  EXPECT_EQ(strict.source, DefaultStepsSource::kProfile);
  EXPECT_EQ(ResolveDefaultSteps(Encoder(8, 16, 0.01), profile).steps, 4);
  EXPECT_EQ(ResolveDefaultSteps(Encoder(8, 16, 0.05), profile).steps, 2);
  // Points outside the step range do not count.
  EXPECT_EQ(ResolveDefaultSteps(Encoder(8, 4, 0), profile).steps, 4);
}

TEST(ResolveDefaultSteps, ATranslatorGetsTheCheapestGreedyPairAndKeepsAFixedHalf) {
  v1::ModelConfig config;
  config.set_task(v1::TRANSLATION);
  config.set_trained_depth(6);
  config.mutable_steps()->set_min(1);
  config.mutable_steps()->set_max(12);
  auto* translation = config.mutable_translation();
  translation->set_decoder_trained_depth(6);
  translation->mutable_decoder_steps()->set_min(1);
  translation->mutable_decoder_steps()->set_max(12);
  v1::QualityProfile profile;
  profile.set_primary_metric("bleu");
  AddPoint(profile, v1::EULER, 6, "bleu", 11.3, 6, 1);
  AddPoint(profile, v1::EULER, 4, "bleu", 11.9, 2, 1);
  AddPoint(profile, v1::EULER, 2, "bleu", 11.8, 3, 1);
  AddPoint(profile, v1::EULER, 3, "bleu", 11.75, 2, 1);
  AddPoint(profile, v1::EULER, 2, "bleu", 12.5, 2, 4);  // a beam point: not a default
  DefaultSteps d = ResolveDefaultSteps(config, profile);
  EXPECT_EQ(d.steps, 4);
  EXPECT_EQ(d.decoder_steps, 2);
  config.set_quality_tolerance(0.2);
  d = ResolveDefaultSteps(config, profile);  // 2+3 and 3+2 cost the same: fewer decoder steps
  EXPECT_EQ(d.steps, 3);
  EXPECT_EQ(d.decoder_steps, 2);
  translation->mutable_decoder_steps()->set_default_steps(3);
  d = ResolveDefaultSteps(config, profile);
  EXPECT_EQ(d.steps, 2);
  EXPECT_EQ(d.decoder_steps, 3);
  EXPECT_EQ(d.source, DefaultStepsSource::kProfile);
}

// The bundled models' defaults, as the README's model table states them, follow from their own
// config.pbtxt and quality.pbtxt: a re-exported profile or a new tolerance that moves one fails
// here until the table is updated with it.
TEST(ResolveDefaultSteps, TheBundledModelsDefaultsAreTheOnesTheReadmeStates) {
  const std::map<std::string, std::pair<int, int>> stated = {
      {"embed-sharebert", {1, 0}},
      {"embed-eelbert", {2, 0}},
      {"classify-sections", {1, 0}},
      {"translate-en-de", {4, 2}},
  };
  for (const auto& [name, steps] : stated) {
    SCOPED_TRACE(name);
    const std::filesystem::path dir = std::filesystem::path(ODESERVE_BUNDLED_REPOSITORY) / name;
    auto config = LoadModelConfig(dir);
    ASSERT_TRUE(config.ok()) << config.status();
    EXPECT_EQ(config->steps().default_steps(), 0) << "the default must follow the profile, not the config";
    auto profile = LoadQualityProfile(*config, dir);
    ASSERT_TRUE(profile.ok()) << profile.status();
    const DefaultSteps d = ResolveDefaultSteps(*config, *profile);
    EXPECT_EQ(d.source, DefaultStepsSource::kProfile);
    EXPECT_EQ(d.steps, steps.first);
    EXPECT_EQ(d.decoder_steps, steps.second);
  }
}

}  // namespace
}  // namespace odeserve::repository
