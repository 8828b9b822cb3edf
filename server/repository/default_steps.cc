#include "server/repository/default_steps.h"

#include <algorithm>
#include <optional>
#include <tuple>
#include <vector>

namespace odeserve::repository {
namespace {

bool InRange(int steps, const v1::StepRange& range) { return steps >= range.min() && steps <= range.max(); }

int ClampedDepth(int depth, const v1::StepRange& range) { return std::clamp(depth, range.min(), range.max()); }

}  // namespace

DefaultSteps ResolveDefaultSteps(const v1::ModelConfig& config, const v1::QualityProfile& profile) {
  const bool translation = config.task() == v1::TRANSLATION;
  const v1::StepRange& encoder = config.steps();
  const v1::StepRange& decoder = config.translation().decoder_steps();
  const int fixed_encoder = encoder.default_steps();
  const int fixed_decoder = translation ? decoder.default_steps() : 0;
  if (fixed_encoder > 0 && (!translation || fixed_decoder > 0)) {
    return {fixed_encoder, fixed_decoder, DefaultStepsSource::kConfig};
  }

  std::vector<const v1::QualityPoint*> points;
  for (const auto& point : profile.points()) {
    if (point.solver() != v1::EULER || !InRange(point.steps(), encoder)) continue;
    if (!profile.primary_metric().empty() && point.metric() != profile.primary_metric()) continue;
    if (fixed_encoder > 0 && point.steps() != fixed_encoder) continue;
    if (translation) {
      if (point.beam_size() > 1 || !InRange(point.decoder_steps(), decoder)) continue;
      if (fixed_decoder > 0 && point.decoder_steps() != fixed_decoder) continue;
    }
    points.push_back(&point);
  }
  if (points.empty()) {
    return {fixed_encoder > 0 ? fixed_encoder : ClampedDepth(config.trained_depth(), encoder),
            translation ? (fixed_decoder > 0 ? fixed_decoder
                                             : ClampedDepth(config.translation().decoder_trained_depth(), decoder))
                        : 0,
            fixed_encoder > 0 || fixed_decoder > 0 ? DefaultStepsSource::kConfig : DefaultStepsSource::kTrainedDepth};
  }
  double best = points.front()->value();
  for (const auto* point : points) best = std::max(best, point->value());
  const v1::QualityPoint* chosen = nullptr;
  auto cost = [](const v1::QualityPoint* p) {
    return std::make_tuple(p->steps() + p->decoder_steps(), p->decoder_steps(), -p->value());
  };
  for (const auto* point : points) {
    if (point->value() < best - config.quality_tolerance()) continue;
    if (chosen == nullptr || cost(point) < cost(chosen)) chosen = point;
  }
  return {chosen->steps(), translation ? chosen->decoder_steps() : 0, DefaultStepsSource::kProfile};
}

std::string_view DefaultStepsSourceName(DefaultStepsSource source) {
  switch (source) {
    case DefaultStepsSource::kConfig: return "config";
    case DefaultStepsSource::kProfile: return "profile";
    case DefaultStepsSource::kTrainedDepth: return "trained_depth";
  }
  return "trained_depth";
}

}  // namespace odeserve::repository
