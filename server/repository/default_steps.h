#pragma once
// The steps a call runs when it names neither steps nor a budget. A config may fix them
// (steps.default_steps); left at 0 they follow the measured quality profile: the cheapest
// Euler point within quality_tolerance of the best, because a step that buys no measurable
// quality is only latency. Pure, so the rule is tested without a server.

#include <string_view>

#include "odeserve/v1/inference.pb.h"
#include "odeserve/v1/model_config.pb.h"

namespace odeserve::repository {

enum class DefaultStepsSource { kConfig, kProfile, kTrainedDepth };

struct DefaultSteps {
  int steps = 0;
  int decoder_steps = 0;  // translation only
  DefaultStepsSource source = DefaultStepsSource::kTrainedDepth;
};

/// Resolves the defaults of a loaded (defaulted, validated) config against its profile.
/// Encoder models: among the profile's Euler points of the primary metric inside the step
/// range, the fewest steps whose quality is at least best - quality_tolerance. Translation: the
/// same over greedy (steps, decoder_steps) pairs, cheapest by steps + decoder_steps, then by
/// fewer decoder steps (the decoder runs once per output token). A default the config sets is
/// kept, and only points that agree with it are considered for the other one. Without such
/// points an unset default is the trained depth.
DefaultSteps ResolveDefaultSteps(const v1::ModelConfig& config, const v1::QualityProfile& profile);

/// "config", "profile" or "trained_depth": GetModel's default_steps_source.
std::string_view DefaultStepsSourceName(DefaultStepsSource source);

}  // namespace odeserve::repository
