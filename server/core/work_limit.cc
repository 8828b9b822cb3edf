#include "server/core/work_limit.h"

#include <limits>

#include "absl/strings/str_cat.h"

namespace odeserve::core {
namespace {

constexpr int64_t kSaturated = std::numeric_limits<int64_t>::max();

// a x b, or kSaturated past int64 (operands are >= 0).
int64_t Times(int64_t a, int64_t b) {
  if (a != 0 && b > kSaturated / a) return kSaturated;
  return a * b;
}

}  // namespace

int64_t CallWork(const CallShape& shape) {
  const int64_t encoder = Times(shape.tokens, shape.encoder_field_evaluations);
  const int64_t decoder =
      Times(Times(shape.hypotheses, shape.max_output_tokens), shape.decoder_field_evaluations);
  return encoder > kSaturated - decoder ? kSaturated : encoder + decoder;
}

absl::Status CheckCallWork(const CallShape& shape, int64_t max_call_work, const std::string& model) {
  const int64_t work = CallWork(shape);
  if (work <= max_call_work) return absl::OkStatus();
  std::string parts = absl::StrCat(shape.tokens, " input tokens x ", shape.encoder_field_evaluations,
                                   " encoder field evaluations");
  if (shape.hypotheses > 0) {
    absl::StrAppend(&parts, " + ", shape.hypotheses, " hypotheses (inputs x beam) x ", shape.max_output_tokens,
                    " output positions x ", shape.decoder_field_evaluations, " decoder field evaluations");
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "this call's work on model '", model, "' is ", work, " token field evaluations (", parts,
      "), over the per-call limit of ", max_call_work,
      " (--max_call_work): send fewer or shorter inputs, or ask for fewer steps",
      shape.hypotheses > 0 ? ", a smaller beam_size or max_output_tokens" : ""));
}

}  // namespace odeserve::core
