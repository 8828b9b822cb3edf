#pragma once
// Explicit ODE solvers over the shared block's vector field, with one step size per batch row
// so that rows running different step counts share a batch.

#include <functional>

#include <torch/torch.h>

#include "server/scheduler/executor.h"

namespace odeserve::runtime {

using scheduler::Solver;
using VectorField = std::function<torch::Tensor(const torch::Tensor& h)>;

/// One step of `solver` from `h` with per-row step sizes `dt` (shape [B], broadcast over the
/// remaining dimensions of h).
torch::Tensor SolverStep(Solver solver, const VectorField& field, const torch::Tensor& h,
                         const torch::Tensor& dt);

/// Integrates dh/dt = field(h) from 0 to `horizon` in `steps` equal steps.
torch::Tensor Integrate(Solver solver, const VectorField& field, torch::Tensor h, double horizon,
                        int steps);

}  // namespace odeserve::runtime
