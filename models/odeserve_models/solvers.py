"""Python mirror of the server's ODE solver loop (docs/MODEL_CONTRACT.md)."""
from torch import Tensor


def solve(model, h: Tensor, mask: Tensor, steps: int, solver: str = "EULER") -> Tensor:
    L = float(model.trained_depth)
    dt = L / float(steps)
    f = model.vector_field
    for _ in range(steps):
        if solver == "EULER":
            h = h + dt * f(h, mask)
        elif solver == "HEUN":
            k1 = f(h, mask)
            k2 = f(h + dt * k1, mask)
            h = h + (dt / 2.0) * (k1 + k2)
        elif solver == "RK4":
            k1 = f(h, mask)
            k2 = f(h + (dt / 2.0) * k1, mask)
            k3 = f(h + (dt / 2.0) * k2, mask)
            k4 = f(h + dt * k3, mask)
            h = h + (dt / 6.0) * (k1 + 2.0 * k2 + 2.0 * k3 + k4)
        else:
            raise ValueError(solver)
    return h


FIELD_EVALS = {"EULER": 1, "HEUN": 2, "RK4": 4}


def run(model, x: Tensor, mask: Tensor, steps: int, solver: str = "EULER") -> Tensor:
    h = model.input_stage(x, mask)
    h = solve(model, h, mask, steps, solver)
    return model.output_stage(h, mask)
