#pragma once
// One model's scheduling settings and quality profile, read by both the batcher
// (model_scheduler.h) and the step planner (step_planner.h).

#include <memory>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "server/scheduler/compute_gate.h"
#include "server/scheduler/executor.h"

namespace odeserve::scheduler {

class SchedulerObserver;  // model_scheduler.h

/// One measured (solver, steps) point: higher quality is better.
struct StepCandidate {
  Solver solver = Solver::kEuler;
  int steps = 1;
  double quality = 0;
  int decoder_steps = 0;  // translation: the decoder's steps (0 for encoder-only models)
};

struct SchedulerOptions {
  std::string model_name;
  int max_batch_size = 32;
  int max_batch_tokens = 8192;
  absl::Duration max_queue_delay = absl::Milliseconds(2);
  // False: a call that finds the model idle (its last batch ran one call, and no call arrived
  // while it ran) starts at once instead of waiting max_queue_delay for company. True here, the
  // plain batcher; the server passes config.pbtxt's batching.queue_delay_when_idle (unset = false).
  bool queue_delay_when_idle = true;
  int max_queue_size = 1024;  // queued rows
  // Batches run padded to a multiple of this many tokens (PaddedLength), at most
  // max_sequence_length: costs and max_batch_tokens count the padded length.
  int pad_to_multiple = 1;
  int max_sequence_length = 0;
  // Continuous batching: queued rows join the running batch at a step boundary (when the
  // executor AcceptsJoins). A batch stops taking rows after kJoinWindowStepsFactor x max_steps
  // steps, when a queued call cannot join it (another solver), when it has fewer than
  // kMinStepsLeftToJoin steps left (both in model_scheduler.h), or when another model waits for
  // the compute gate; it then runs its rows to the end.
  bool continuous_batching = false;
  int min_steps = 1;
  int max_steps = 1;
  int default_steps = 1;
  // Translation models: the decoder's step range (all 0 for encoder-only models).
  int min_decoder_steps = 0;
  int max_decoder_steps = 0;
  int default_decoder_steps = 0;
  std::vector<Solver> solvers{Solver::kEuler};
  /// Measured quality per (solver, steps); empty = Euler at every step count, quality = steps.
  std::vector<StepCandidate> candidates;
  /// Budgeted choices within this much quality of the best affordable one count as equal; the
  /// cheapest of them is taken (config.pbtxt quality_tolerance).
  double quality_tolerance = 0;
  std::shared_ptr<ComputeGate> gate;       // optional
  SchedulerObserver* observer = nullptr;   // optional, must outlive the scheduler (or SetObserver)
};

}  // namespace odeserve::scheduler
