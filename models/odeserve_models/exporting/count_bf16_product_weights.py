"""Counts the float32 tensors the server stores in bfloat16 at load, by the rule of
TorchModel::StoreProductWeightsInBfloat16 (server/runtime/torch_model.cc), walked independently
here over fully inlined graphs: a module tensor qualifies when every read of it, in every served
method, is a product autocast runs in bfloat16 or a shape/device read. The counts are the ones
runtime_test's BundledModelUnderGraphOptimizer expects.

  PYTHONPATH=models /usr/bin/python3 -m odeserve_models count-bf16-weights models/repository/classify-sections/model.pt ...
"""
import torch

from odeserve_models.cli import parser

PRODUCTS = {"aten::linear", "aten::matmul", "aten::mm", "aten::bmm", "aten::addmm", "aten::baddbmm",
            "aten::addbmm"}
METADATA = {"aten::numel", "aten::size", "aten::dim", "prim::device"}
METHODS = ["input_stage", "vector_field", "output_stage", "forward"]
DECODER_METHODS = ["cross_kv", "decoder_input", "decoder_field", "decoder_logits"]


def attribute_path(get_attr, self_value):
    """Attribute names from `self` down to `get_attr`, or None when the chain starts elsewhere."""
    path, node = [], get_attr
    while True:
        path.insert(0, node.s("name"))
        source = node.input()
        if source.debugName() == self_value.debugName():
            return tuple(path)
        node = source.node()
        if node.kind() != "prim::GetAttr":
            return None


def count(model_file):
    module = torch.jit.load(model_file)
    if hasattr(module, "prepare"):
        module.prepare()  # ShareBERT materializes its layer weights here, as the server's load does
    methods = METHODS + (DECODER_METHODS if hasattr(module, "decoder_field") else [])
    product_only = {}
    for method in methods:
        graph = getattr(module, method).graph.copy()
        # Python's pass runs with the graph optimizer on, so callees arrive pre-inlined; repeat
        # anyway, and refuse to count over a graph that still calls something.
        for _ in range(32):
            torch._C._jit_pass_inline(graph)
        calls = graph.findAllNodes("prim::CallFunction") + graph.findAllNodes("prim::CallMethod")
        if calls:
            raise SystemExit(f"{model_file}: {method} still has {len(calls)} calls after inlining")
        self_value = list(graph.inputs())[0]
        for node in graph.findAllNodes("prim::GetAttr"):
            if not node.output().type().isSubtypeOf(torch._C.TensorType.get()):
                continue
            path = attribute_path(node, self_value)
            if path is None:
                continue
            ok = all(use.user.kind() in PRODUCTS | METADATA for use in node.output().uses())
            product_only[path] = product_only.get(path, True) and ok
    tensors = values = 0
    for path, ok in product_only.items():
        if not ok:
            continue
        value = module
        for name in path:
            value = getattr(value, name)
        if value.dtype == torch.float32:
            tensors += 1
            values += value.numel()
    return tensors, values


def main(argv=None) -> int:
    ap = parser("count-bf16-weights", __doc__)
    ap.add_argument("model_files", nargs="+", metavar="MODEL_PT", help="exported model.pt files")
    for model_file in ap.parse_args(argv).model_files:
        tensors, values = count(model_file)
        print(f"{model_file}: {tensors} tensors, {values} values")
    return 0
