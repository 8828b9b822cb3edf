"""Python client for odeserve (gRPC service odeserve.v1.Inference).

    from odeserve_client import Client
    c = Client("localhost:8500")
    e = c.embed(["a", "b"], model="embed-sharebert", budget=0.010)

See client/python/README.md. The gRPC stubs are generated from proto/odeserve/v1/inference.proto:
at build time for an installed package, on first import (into a cache folder) from the source
tree; ``odeserve_client._proto`` holds them.
"""
from ._version import __version__
from .client import Client
from .datatypes import (BudgetMissPolicy, ClassifyResult, ComputeReport, CostModel, EmbedResult, ModelInfo,
                        QualityPoint, Solver, TranslateResult, TranslateStreamMessage, TranslationInfo)
from .errors import OdeserveError

__all__ = [
    "Client", "OdeserveError", "Solver", "BudgetMissPolicy", "ComputeReport", "EmbedResult", "ClassifyResult",
    "TranslateResult", "TranslateStreamMessage", "ModelInfo", "QualityPoint", "CostModel", "TranslationInfo",
    "__version__",
]
