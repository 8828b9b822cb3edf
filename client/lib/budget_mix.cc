#include "client/lib/budget_mix.h"

#include <cmath>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "client/lib/random.h"

namespace odeserve::client {

absl::StatusOr<std::vector<BudgetClass>> ParseBudgetMix(absl::string_view spec) {
  std::vector<BudgetClass> out;
  if (absl::StripAsciiWhitespace(spec).empty()) {
    return absl::InvalidArgumentError("budget mix is empty (e.g. 5ms,10ms,20ms,40ms or none)");
  }
  for (absl::string_view raw : absl::StrSplit(spec, ',')) {
    absl::string_view item = absl::StripAsciiWhitespace(raw);
    if (item.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("budget mix '", spec, "' has an empty item"));
    }
    BudgetClass cls;
    const size_t colon = item.find(':');
    if (colon != absl::string_view::npos) {
      absl::string_view w = item.substr(colon + 1);
      if (!absl::SimpleAtod(w, &cls.weight) || !(cls.weight > 0) || !std::isfinite(cls.weight)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "budget mix item '", item, "': weight '", w, "' is not a positive number"));
      }
      item = item.substr(0, colon);
    }
    if (absl::AsciiStrToLower(item) == "none") {
      cls.label = "none";
    } else {
      absl::Duration d;
      if (!absl::ParseDuration(item, &d)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "budget mix item '", item, "' is not a duration (e.g. 5ms, 250us, 1s) or 'none'"));
      }
      if (d <= absl::ZeroDuration() || d == absl::InfiniteDuration()) {
        return absl::InvalidArgumentError(
            absl::StrCat("budget mix item '", item, "' must be a positive, finite duration"));
      }
      cls.budget = d;
      cls.label = absl::FormatDuration(d);
    }
    for (const auto& prev : out) {
      if (prev.label == cls.label) {
        return absl::InvalidArgumentError(
            absl::StrCat("budget mix '", spec, "' lists ", cls.label, " twice"));
      }
    }
    out.push_back(std::move(cls));
  }
  return out;
}

BudgetSampler::BudgetSampler(const std::vector<BudgetClass>& classes, uint64_t seed)
    : rng_(seed) {
  double total = 0;
  for (const auto& c : classes) total += c.weight;
  double acc = 0;
  for (const auto& c : classes) {
    acc += c.weight / total;
    cumulative_.push_back(acc);
  }
  if (!cumulative_.empty()) cumulative_.back() = 1.0;
}

size_t BudgetSampler::Next() {
  if (cumulative_.size() <= 1) return 0;
  const double u = UniformUnit(rng_);
  for (size_t i = 0; i < cumulative_.size(); ++i) {
    if (u < cumulative_[i]) return i;
  }
  return cumulative_.size() - 1;
}

}  // namespace odeserve::client
