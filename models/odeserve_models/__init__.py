"""odeserve model code: hashing, encoder families, solvers, export (see models/README.md)."""
