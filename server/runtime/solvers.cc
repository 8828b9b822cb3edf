#include "server/runtime/solvers.h"

namespace odeserve::runtime {
namespace {

torch::Tensor BroadcastRows(const torch::Tensor& dt, const torch::Tensor& like) {
  std::vector<int64_t> shape(like.dim(), 1);
  shape[0] = dt.size(0);
  return dt.view(shape);
}

}  // namespace

torch::Tensor SolverStep(Solver solver, const VectorField& field, const torch::Tensor& h,
                         const torch::Tensor& dt) {
  const torch::Tensor step = BroadcastRows(dt.to(h.dtype()), h);
  switch (solver) {
    case Solver::kEuler:
      return torch::addcmul(h, step, field(h));
    case Solver::kHeun: {
      const torch::Tensor k1 = field(h);
      const torch::Tensor k2 = field(torch::addcmul(h, step, k1));
      return torch::addcmul(h, step * 0.5, k1 + k2);
    }
    case Solver::kRk4: {
      const torch::Tensor half = step * 0.5;
      const torch::Tensor k1 = field(h);
      const torch::Tensor k2 = field(torch::addcmul(h, half, k1));
      const torch::Tensor k3 = field(torch::addcmul(h, half, k2));
      const torch::Tensor k4 = field(torch::addcmul(h, step, k3));
      return torch::addcmul(h, step / 6.0, k1 + 2.0 * (k2 + k3) + k4);
    }
  }
  return h;
}

torch::Tensor Integrate(Solver solver, const VectorField& field, torch::Tensor h, double horizon,
                        int steps) {
  const torch::Tensor dt =
      torch::full({h.size(0)}, horizon / steps, torch::TensorOptions().dtype(torch::kFloat64).device(h.device()));
  for (int i = 0; i < steps; ++i) h = SolverStep(solver, field, h, dt);
  return h;
}

}  // namespace odeserve::runtime
