#pragma once
// The per-call work limit (--max_call_work): what one call may make the server compute, counted
// before any compute is spent, so that one legal but enormous request is refused up front
// instead of holding the compute slot for minutes. docs/LIMITS.md lists every limit.

#include <cstdint>
#include <string>

#include "absl/status/status.h"

namespace odeserve::core {

/// The shape of a planned call, as the work count sees it.
struct CallShape {
  int64_t tokens = 0;                  // input tokens of every input, after tokenization
  int encoder_field_evaluations = 0;   // steps x evaluations per step of the solver
  // Translation only (0 otherwise):
  int64_t hypotheses = 0;              // inputs x beam size
  int max_output_tokens = 0;           // decoder positions each hypothesis may run
  int decoder_field_evaluations = 0;   // decoder steps (the decoder integrates with Euler)
};

/// Token field evaluations the call may cost at most: every input token through every encoder
/// field evaluation, plus every hypothesis through every decoder field evaluation at each
/// output position it may run. Saturates at INT64_MAX.
int64_t CallWork(const CallShape& shape);

/// OK when CallWork(shape) <= max_call_work; else INVALID_ARGUMENT naming the model, the work
/// and how it is made up, the limit and its flag.
absl::Status CheckCallWork(const CallShape& shape, int64_t max_call_work, const std::string& model);

}  // namespace odeserve::core
