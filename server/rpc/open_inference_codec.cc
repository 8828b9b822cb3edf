#include "server/rpc/open_inference_codec.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <map>

#include <google/protobuf/descriptor.h>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "server/common/status_macros.h"
#include "server/tokenizer/ngram_hash.h"

namespace odeserve::rpc::oip {
namespace {

using ParameterMap = google::protobuf::Map<std::string, inference::InferParameter>;

constexpr char kBinaryDataOutput[] = "binary_data_output";  // request: raw outputs or not
constexpr char kBinaryData[] = "binary_data";                // per requested output: the same

std::string ShapeString(const google::protobuf::RepeatedField<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

// The oneof member a parameter was sent as, for type errors ("string_param").
std::string ValueKind(const inference::InferParameter& parameter) {
  if (parameter.parameter_choice_case() == inference::InferParameter::PARAMETER_CHOICE_NOT_SET) {
    return "no value";
  }
  return inference::InferParameter::descriptor()->FindFieldByNumber(parameter.parameter_choice_case())->name();
}

absl::Status WrongType(absl::string_view name, absl::string_view expected, const inference::InferParameter& value) {
  return absl::InvalidArgumentError(
      absl::StrCat("parameter '", name, "' must be ", expected, ", got ", ValueKind(value)));
}

// Integers may come as int64_param (tritonclient, KServe) or uint64_param (unsigned numpy values).
absl::StatusOr<int32_t> Int32Parameter(absl::string_view name, const inference::InferParameter& value) {
  int64_t v = 0;
  switch (value.parameter_choice_case()) {
    case inference::InferParameter::kInt64Param: v = value.int64_param(); break;
    case inference::InferParameter::kUint64Param:
      if (value.uint64_param() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        return absl::InvalidArgumentError(absl::StrCat("parameter '", name, "' ", value.uint64_param(),
                                                       " is outside the 32-bit integer range"));
      }
      v = static_cast<int64_t>(value.uint64_param());
      break;
    default: return WrongType(name, "an integer (int64_param)", value);
  }
  if (v < std::numeric_limits<int32_t>::min() || v > std::numeric_limits<int32_t>::max()) {
    return absl::InvalidArgumentError(absl::StrCat("parameter '", name, "' ", v, " is outside the 32-bit integer range"));
  }
  return static_cast<int32_t>(v);
}

absl::StatusOr<int64_t> Int64Parameter(absl::string_view name, const inference::InferParameter& value) {
  if (value.parameter_choice_case() == inference::InferParameter::kInt64Param) return value.int64_param();
  if (value.parameter_choice_case() == inference::InferParameter::kUint64Param &&
      value.uint64_param() <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    return static_cast<int64_t>(value.uint64_param());
  }
  if (value.parameter_choice_case() == inference::InferParameter::kUint64Param) {
    return absl::InvalidArgumentError(absl::StrCat("parameter '", name, "' ", value.uint64_param(), " is too large"));
  }
  return WrongType(name, "an integer (int64_param)", value);
}

absl::StatusOr<bool> BoolParameter(absl::string_view name, const inference::InferParameter& value) {
  if (value.parameter_choice_case() != inference::InferParameter::kBoolParam) {
    return WrongType(name, "a bool (bool_param)", value);
  }
  return value.bool_param();
}

absl::StatusOr<std::string> StringParameter(absl::string_view name, const inference::InferParameter& value) {
  if (value.parameter_choice_case() != inference::InferParameter::kStringParam) {
    return WrongType(name, "a string (string_param)", value);
  }
  return value.string_param();
}

absl::StatusOr<double> DoubleParameter(absl::string_view name, const inference::InferParameter& value) {
  switch (value.parameter_choice_case()) {
    case inference::InferParameter::kDoubleParam: return value.double_param();
    case inference::InferParameter::kInt64Param: return static_cast<double>(value.int64_param());
    case inference::InferParameter::kUint64Param: return static_cast<double>(value.uint64_param());
    default: return WrongType(name, "a number (double_param)", value);
  }
}

std::vector<std::string> OutputsOf(v1::Task task) {
  switch (task) {
    case v1::EMBEDDING: return {kEmbeddingOutput};
    case v1::CLASSIFICATION: return {kProbabilitiesOutput, kLabelOutput};
    case v1::TRANSLATION: return {kTranslationOutput, kScoreOutput};
    default: return {};
  }
}

// Parameters each task takes beyond the common ones, for the unknown-parameter message.
std::vector<std::string> ParametersOf(v1::Task task) {
  std::vector<std::string> names = {"steps", "min_steps", "solver", "latency_budget_us", "on_budget_miss",
                                    "truncate"};
  if (task == v1::EMBEDDING) names.push_back("normalize");
  if (task == v1::CLASSIFICATION) names.push_back("top_k");
  if (task == v1::TRANSLATION) {
    for (const char* name : {"decoder_steps", "beam_size", "max_output_tokens", "length_penalty"}) names.push_back(name);
  }
  names.push_back(kBinaryDataOutput);
  return names;
}

// The one task a task-specific parameter belongs to, or TASK_UNSPECIFIED for a common one.
v1::Task TaskOfParameter(absl::string_view name) {
  if (name == "normalize") return v1::EMBEDDING;
  if (name == "top_k") return v1::CLASSIFICATION;
  if (name == "beam_size" || name == "max_output_tokens" || name == "length_penalty") return v1::TRANSLATION;
  return v1::TASK_UNSPECIFIED;
}

int64_t Micros(const google::protobuf::Duration& d) { return d.seconds() * 1000000 + d.nanos() / 1000; }

inference::InferParameter IntValue(int64_t v) {
  inference::InferParameter p;
  p.set_int64_param(v);
  return p;
}
inference::InferParameter BoolValue(bool v) {
  inference::InferParameter p;
  p.set_bool_param(v);
  return p;
}
inference::InferParameter StringValue(std::string v) {
  inference::InferParameter p;
  p.set_string_param(std::move(v));
  return p;
}
inference::InferParameter DoubleValue(double v) {
  inference::InferParameter p;
  p.set_double_param(v);
  return p;
}

void AddFp32(const std::string& name, std::vector<int64_t> shape, const std::vector<float>& values, bool raw,
             inference::ModelInferResponse* out) {
  auto* tensor = out->add_outputs();
  tensor->set_name(name);
  tensor->set_datatype("FP32");
  tensor->mutable_shape()->Add(shape.begin(), shape.end());
  if (raw) {
    out->add_raw_output_contents(EncodeRawFp32(values));
  } else {
    tensor->mutable_contents()->mutable_fp32_contents()->Add(values.begin(), values.end());
  }
}

void AddBytes(const std::string& name, std::vector<int64_t> shape, const std::vector<std::string>& values, bool raw,
              inference::ModelInferResponse* out) {
  auto* tensor = out->add_outputs();
  tensor->set_name(name);
  tensor->set_datatype("BYTES");
  tensor->mutable_shape()->Add(shape.begin(), shape.end());
  if (raw) {
    out->add_raw_output_contents(EncodeRawBytes(values));
  } else {
    tensor->mutable_contents()->mutable_bytes_contents()->Add(values.begin(), values.end());
  }
}

// Name, version, id and report: what every response carries.
void EncodeCommon(const V1Call& call, const v1::ModelInfo& model, const v1::ComputeReport& report,
                  inference::ModelInferResponse* out) {
  out->set_model_name(model.name());
  out->set_model_version(model.version());
  out->set_id(call.id);
  ReportParameters(report, model.task() == v1::TRANSLATION, out->mutable_parameters());
}

inference::ModelMetadataResponse::TensorMetadata Tensor(const std::string& name, const std::string& datatype,
                                                        std::vector<int64_t> shape) {
  inference::ModelMetadataResponse::TensorMetadata tensor;
  tensor.set_name(name);
  tensor.set_datatype(datatype);
  tensor.mutable_shape()->Add(shape.begin(), shape.end());
  return tensor;
}

}  // namespace

absl::StatusOr<std::vector<std::string>> ParseRawBytes(absl::string_view raw, absl::string_view what) {
  std::vector<std::string> elements;
  size_t pos = 0;
  while (pos < raw.size()) {
    if (raw.size() - pos < 4) {
      return absl::InvalidArgumentError(absl::StrCat(what, " is truncated: element ", elements.size(), " at byte ",
                                                     pos, " needs a 4-byte length prefix, but ", raw.size() - pos,
                                                     " bytes are left"));
    }
    const auto* p = reinterpret_cast<const unsigned char*>(raw.data() + pos);
    const uint32_t length = uint32_t{p[0]} | uint32_t{p[1]} << 8 | uint32_t{p[2]} << 16 | uint32_t{p[3]} << 24;
    pos += 4;
    if (length > raw.size() - pos) {
      return absl::InvalidArgumentError(absl::StrCat(what, " is truncated: element ", elements.size(), " declares ",
                                                     length, " bytes at byte ", pos, ", but ", raw.size() - pos,
                                                     " bytes are left"));
    }
    elements.emplace_back(raw.substr(pos, length));
    pos += length;
  }
  return elements;
}

std::string EncodeRawBytes(const std::vector<std::string>& elements) {
  std::string raw;
  size_t size = 0;
  for (const auto& e : elements) size += 4 + e.size();
  raw.reserve(size);
  for (const auto& e : elements) {
    const auto length = static_cast<uint32_t>(e.size());
    for (int shift = 0; shift < 32; shift += 8) raw.push_back(static_cast<char>((length >> shift) & 0xFF));
    raw += e;
  }
  return raw;
}

std::string EncodeRawFp32(const std::vector<float>& values) {
  std::string raw(values.size() * 4, '\0');
  for (size_t i = 0; i < values.size(); ++i) {
    uint32_t bits;
    std::memcpy(&bits, &values[i], 4);
    // Little-endian whatever the host: the protocol fixes the byte order.
    for (int b = 0; b < 4; ++b) raw[i * 4 + b] = static_cast<char>((bits >> (8 * b)) & 0xFF);
  }
  return raw;
}

absl::StatusOr<std::vector<std::string>> DecodeTextInput(const inference::ModelInferRequest& request) {
  const std::string expected = "the model takes one BYTES tensor 'text' of shape [N]";
  int text_index = -1;
  for (int i = 0; i < request.inputs_size(); ++i) {
    const std::string& name = request.inputs(i).name();
    if (name != kTextInput) {
      return absl::InvalidArgumentError(absl::StrCat("unknown input tensor '", name, "': ", expected));
    }
    if (text_index >= 0) return absl::InvalidArgumentError("input tensor 'text' is given more than once");
    text_index = i;
  }
  if (text_index < 0) return absl::InvalidArgumentError(absl::StrCat("input tensor 'text' is missing: ", expected));
  const auto& tensor = request.inputs(text_index);
  if (tensor.datatype() != "BYTES") {
    return absl::InvalidArgumentError(
        absl::StrCat("input 'text' has datatype '", tensor.datatype(), "'; expected BYTES"));
  }
  if (!tensor.parameters().empty()) {
    return absl::InvalidArgumentError(absl::StrCat("input 'text': unknown parameter '",
                                                   tensor.parameters().begin()->first,
                                                   "' (input tensors take no parameters)"));
  }
  if (tensor.shape_size() != 1) {
    return absl::InvalidArgumentError(absl::StrCat("input 'text' has shape ", ShapeString(tensor.shape()), " (rank ",
                                                   tensor.shape_size(), "); expected rank 1: [N]"));
  }
  if (tensor.shape(0) < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("input 'text' has shape ", ShapeString(tensor.shape()), "; dimensions must be >= 0"));
  }

  const auto& contents = tensor.contents();
  std::vector<std::string> texts;
  if (!request.raw_input_contents().empty()) {
    if (request.raw_input_contents_size() != request.inputs_size()) {
      return absl::InvalidArgumentError(absl::StrCat("raw_input_contents has ", request.raw_input_contents_size(),
                                                     " entries for ", request.inputs_size(),
                                                     " input tensors; send one per input"));
    }
    if (tensor.has_contents() && contents.ByteSizeLong() > 0) {
      return absl::InvalidArgumentError(
          "input 'text' sets contents while the request sends raw_input_contents; use one of them");
    }
    ASSIGN_OR_RETURN(texts, ParseRawBytes(request.raw_input_contents(text_index),
                                          absl::StrCat("raw_input_contents[", text_index, "] (input 'text')")));
  } else {
    // Only bytes_contents may be set: any other typed field means the tensor is not text.
    const auto* descriptor = inference::InferTensorContents::descriptor();
    const auto* reflection = inference::InferTensorContents::GetReflection();
    for (int f = 0; f < descriptor->field_count(); ++f) {
      const auto* field = descriptor->field(f);
      if (field->name() != "bytes_contents" && reflection->FieldSize(contents, field) > 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("input 'text' is BYTES but sets contents.", field->name(), "; send its texts in contents.bytes_contents"));
      }
    }
    texts.assign(contents.bytes_contents().begin(), contents.bytes_contents().end());
  }
  if (static_cast<int64_t>(texts.size()) != tensor.shape(0)) {
    return absl::InvalidArgumentError(absl::StrCat("input 'text' has shape ", ShapeString(tensor.shape()), " but ",
                                                   texts.size(), " elements"));
  }
  // Protobuf checks UTF-8 only for `string` fields; tensor elements are `bytes`.
  for (size_t i = 0; i < texts.size(); ++i) {
    if (!tokenizer::IsValidUtf8(texts[i])) {
      return absl::InvalidArgumentError(absl::StrCat("input 'text' element ", i, " is not valid UTF-8"));
    }
  }
  return texts;
}

absl::Status ApplyParameters(const ParameterMap& parameters, const v1::ModelInfo& model, V1Call* call) {
  const v1::Task task = model.task();
  v1::ComputeOptions* compute = std::visit([](auto& r) { return r.mutable_compute(); }, call->request);
  // Sorted, so that the first error of a request is the same on every call (Map order is not).
  std::vector<std::string> names;
  for (const auto& entry : parameters) names.push_back(entry.first);
  std::sort(names.begin(), names.end());
  for (const std::string& name : names) {
    const inference::InferParameter& value = parameters.at(name);
    const v1::Task owner = TaskOfParameter(name);
    if (owner != v1::TASK_UNSPECIFIED && owner != task) {
      return absl::InvalidArgumentError(absl::StrCat("parameter '", name, "' is only for ", v1::Task_Name(owner),
                                                     " models; model '", model.name(), "' is ",
                                                     v1::Task_Name(task)));
    }
    if (name == "steps") {
      ASSIGN_OR_RETURN(const int32_t v, Int32Parameter(name, value));
      compute->set_steps(v);
    } else if (name == "min_steps") {
      ASSIGN_OR_RETURN(const int32_t v, Int32Parameter(name, value));
      compute->set_min_steps(v);
    } else if (name == "decoder_steps") {
      // Left to the core on other tasks: it refuses with v1's message.
      ASSIGN_OR_RETURN(const int32_t v, Int32Parameter(name, value));
      compute->set_decoder_steps(v);
    } else if (name == "solver") {
      ASSIGN_OR_RETURN(const std::string v, StringParameter(name, value));
      const std::string lower = absl::AsciiStrToLower(v);
      if (lower == "euler") {
        compute->set_solver(v1::EULER);
      } else if (lower == "heun") {
        compute->set_solver(v1::HEUN);
      } else if (lower == "rk4") {
        compute->set_solver(v1::RK4);
      } else {
        return absl::InvalidArgumentError(
            absl::StrCat("parameter 'solver' is '", v, "'; expected euler, heun or rk4"));
      }
    } else if (name == "latency_budget_us") {
      ASSIGN_OR_RETURN(const int64_t us, Int64Parameter(name, value));
      // Seconds and nanos carry the sign; the core refuses budgets <= 0 with v1's message.
      compute->mutable_latency_budget()->set_seconds(us / 1000000);
      compute->mutable_latency_budget()->set_nanos(static_cast<int32_t>(us % 1000000) * 1000);
    } else if (name == "on_budget_miss") {
      ASSIGN_OR_RETURN(const std::string v, StringParameter(name, value));
      const std::string lower = absl::AsciiStrToLower(v);
      if (lower == "serve_floor") {
        compute->set_on_budget_miss(v1::SERVE_FLOOR);
      } else if (lower == "refuse") {
        compute->set_on_budget_miss(v1::REFUSE);
      } else {
        return absl::InvalidArgumentError(
            absl::StrCat("parameter 'on_budget_miss' is '", v, "'; expected serve_floor or refuse"));
      }
    } else if (name == "truncate") {
      ASSIGN_OR_RETURN(const bool v, BoolParameter(name, value));
      std::visit([v](auto& r) { r.set_truncate(v); }, call->request);
    } else if (name == "normalize") {
      ASSIGN_OR_RETURN(const bool v, BoolParameter(name, value));
      std::get<v1::EmbedRequest>(call->request).set_normalize(v);
    } else if (name == "top_k") {
      ASSIGN_OR_RETURN(const int32_t v, Int32Parameter(name, value));
      if (v < 0) return absl::InvalidArgumentError(absl::StrCat("top_k must be >= 0, got ", v));  // v1's message
      call->top_k = std::clamp(v, 1, std::max(1, model.labels_size()));
    } else if (name == "beam_size") {
      ASSIGN_OR_RETURN(const int32_t v, Int32Parameter(name, value));
      std::get<v1::TranslateRequest>(call->request).set_beam_size(v);
    } else if (name == "max_output_tokens") {
      ASSIGN_OR_RETURN(const int32_t v, Int32Parameter(name, value));
      std::get<v1::TranslateRequest>(call->request).set_max_output_tokens(v);
    } else if (name == "length_penalty") {
      ASSIGN_OR_RETURN(const double v, DoubleParameter(name, value));
      std::get<v1::TranslateRequest>(call->request).set_length_penalty(static_cast<float>(v));
    } else if (name == kBinaryDataOutput) {
      // ResolveRawOutput reads it.
    } else {
      return absl::InvalidArgumentError(absl::StrCat("unknown parameter '", name, "'; model '", model.name(), "' (",
                                                     v1::Task_Name(task), ") takes ",
                                                     absl::StrJoin(ParametersOf(task), ", ")));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<bool> ResolveRawOutput(const inference::ModelInferRequest& request) {
  std::optional<bool> requested;
  if (auto it = request.parameters().find(kBinaryDataOutput); it != request.parameters().end()) {
    ASSIGN_OR_RETURN(requested, BoolParameter(kBinaryDataOutput, it->second));
  }
  std::optional<bool> per_output;
  for (const auto& output : request.outputs()) {
    for (const auto& [name, value] : output.parameters()) {
      if (name != kBinaryData) {
        return absl::InvalidArgumentError(absl::StrCat("output '", output.name(), "': unknown parameter '", name,
                                                       "' (outputs take binary_data)"));
      }
      if (value.parameter_choice_case() != inference::InferParameter::kBoolParam) {
        return absl::InvalidArgumentError(absl::StrCat("output '", output.name(),
                                                       "': parameter 'binary_data' must be a bool (bool_param), got ",
                                                       ValueKind(value)));
      }
      // The v2 gRPC response holds every output raw or none (raw_output_contents is positional).
      if (per_output && *per_output != value.bool_param()) {
        return absl::InvalidArgumentError(
            "outputs mix binary_data true and false; a response carries all outputs raw or none");
      }
      per_output = value.bool_param();
    }
  }
  if (requested) return *requested;
  if (per_output) return *per_output;
  return !request.raw_input_contents().empty();
}

absl::StatusOr<V1Call> ToV1Call(const inference::ModelInferRequest& request, const v1::ModelInfo& model) {
  ASSIGN_OR_RETURN(std::vector<std::string> texts, DecodeTextInput(request));
  V1Call call;
  call.id = request.id();
  auto fill = [&](auto& r) {
    r.set_model(model.name());
    for (auto& text : texts) r.add_inputs(std::move(text));
  };
  switch (model.task()) {
    case v1::EMBEDDING: call.request = v1::EmbedRequest(); break;
    case v1::CLASSIFICATION: call.request = v1::ClassifyRequest(); break;
    case v1::TRANSLATION: call.request = v1::TranslateRequest(); break;
    default:
      return absl::FailedPreconditionError(
          absl::StrCat("model '", model.name(), "' has no task the v2 API serves"));
  }
  std::visit(fill, call.request);
  RETURN_IF_ERROR(ApplyParameters(request.parameters(), model, &call));
  if (auto* classify = std::get_if<v1::ClassifyRequest>(&call.request)) {
    // Every label's probability feeds `probabilities`; `label` keeps the call's top_k.
    classify->set_top_k(std::max(1, model.labels_size()));
  }

  const std::vector<std::string> available = OutputsOf(model.task());
  for (const auto& output : request.outputs()) {
    if (std::find(available.begin(), available.end(), output.name()) == available.end()) {
      return absl::InvalidArgumentError(absl::StrCat("unknown output '", output.name(), "'; model '", model.name(),
                                                     "' produces ", absl::StrJoin(available, ", ")));
    }
    if (std::find(call.outputs.begin(), call.outputs.end(), output.name()) != call.outputs.end()) {
      return absl::InvalidArgumentError(absl::StrCat("output '", output.name(), "' is requested more than once"));
    }
    call.outputs.push_back(output.name());
  }
  if (call.outputs.empty()) call.outputs = available;
  ASSIGN_OR_RETURN(call.raw_output, ResolveRawOutput(request));
  return call;
}

void EncodeEmbed(const v1::EmbedResponse& response, const V1Call& call, const v1::ModelInfo& model,
                 inference::ModelInferResponse* out) {
  EncodeCommon(call, model, response.report(), out);
  const int64_t rows = response.embeddings_size();
  const int64_t dim = rows > 0 ? response.embeddings(0).values_size() : model.embedding_dimension();
  std::vector<float> values;
  values.reserve(rows * dim);
  for (const auto& e : response.embeddings()) values.insert(values.end(), e.values().begin(), e.values().end());
  for (const auto& name : call.outputs) {
    if (name == kEmbeddingOutput) AddFp32(name, {rows, dim}, values, call.raw_output, out);
  }
}

void EncodeClassify(const v1::ClassifyResponse& response, const V1Call& call, const v1::ModelInfo& model,
                    inference::ModelInferResponse* out) {
  EncodeCommon(call, model, response.report(), out);
  const int64_t rows = response.results_size();
  const int64_t labels = model.labels_size();
  std::map<std::string, int64_t> index;
  for (int64_t i = 0; i < labels; ++i) index.emplace(model.labels(i), i);
  const int k = std::min<int>(call.top_k, static_cast<int>(labels));
  std::vector<float> probabilities(rows * labels, 0.0f);
  std::vector<std::string> best;
  for (int64_t r = 0; r < rows; ++r) {
    const auto& result = response.results(r);
    for (const auto& scored : result.labels()) {
      if (auto it = index.find(scored.label()); it != index.end()) probabilities[r * labels + it->second] = scored.score();
    }
    // v1 results are best first.
    for (int j = 0; j < k; ++j) best.push_back(j < result.labels_size() ? result.labels(j).label() : "");
  }
  for (const auto& name : call.outputs) {
    if (name == kProbabilitiesOutput) AddFp32(name, {rows, labels}, probabilities, call.raw_output, out);
    if (name == kLabelOutput) {
      AddBytes(name, call.top_k > 1 ? std::vector<int64_t>{rows, k} : std::vector<int64_t>{rows}, best,
               call.raw_output, out);
    }
  }
}

void EncodeTranslate(const v1::TranslateResponse& response, const V1Call& call, const v1::ModelInfo& model,
                     inference::ModelInferResponse* out) {
  EncodeCommon(call, model, response.report(), out);
  const int64_t rows = response.translations_size();
  const std::vector<std::string> texts(response.translations().begin(), response.translations().end());
  const std::vector<float> scores(response.scores().begin(), response.scores().end());
  for (const auto& name : call.outputs) {
    if (name == kTranslationOutput) AddBytes(name, {rows}, texts, call.raw_output, out);
    if (name == kScoreOutput) AddFp32(name, {rows}, scores, call.raw_output, out);
  }
}

void ReportParameters(const v1::ComputeReport& report, bool translation, ParameterMap* parameters) {
  auto& p = *parameters;
  p["steps"] = IntValue(report.steps());
  p["solver"] = StringValue(absl::AsciiStrToLower(v1::Solver_Name(report.solver())));
  p["step_size"] = DoubleValue(report.step_size());
  p["field_evaluations"] = IntValue(report.field_evaluations());
  p["queue_us"] = IntValue(Micros(report.queue_time()));
  p["compute_us"] = IntValue(Micros(report.compute_time()));
  p["total_us"] = IntValue(Micros(report.total_time()));
  p["predicted_us"] = IntValue(Micros(report.predicted_time()));
  p["budget_set"] = BoolValue(report.budget_set());
  if (report.budget_set()) p["budget_us"] = IntValue(Micros(report.budget()));
  p["budget_met"] = BoolValue(report.budget_met());
  p["batch_size"] = IntValue(report.batch_size());
  p["step_choice"] = StringValue(absl::AsciiStrToLower(v1::StepChoice_Name(report.step_choice())));
  p["device"] = StringValue(report.device());
  p["tokens"] = IntValue(report.tokens());
  p["truncated_inputs"] = IntValue(report.truncated_inputs());
  if (translation) {
    p["decoder_steps"] = IntValue(report.decoder_steps());
    p["decoder_step_size"] = DoubleValue(report.decoder_step_size());
    p["beam_size"] = IntValue(report.beam_size());
    p["output_tokens"] = IntValue(report.output_tokens());
  }
}

absl::Status CheckServable(const v1::ModelInfo& model, absl::string_view version) {
  if (model.state() != v1::READY) {
    // v1's message for the same call (core FindServable).
    return absl::FailedPreconditionError(
        absl::StrCat("model '", model.name(), "' is not serving: it failed to load: ", model.error()));
  }
  if (!version.empty() && version != model.version()) {
    return absl::NotFoundError(absl::StrCat("model '", model.name(), "' has no version '", version,
                                            "'; it serves version '", model.version(), "'"));
  }
  return absl::OkStatus();
}

inference::ModelMetadataResponse ModelMetadata(const v1::ModelInfo& model) {
  inference::ModelMetadataResponse metadata;
  metadata.set_name(model.name());
  metadata.add_versions(model.version());
  metadata.set_platform(kPlatform);
  *metadata.add_inputs() = Tensor(kTextInput, "BYTES", {-1});
  switch (model.task()) {
    case v1::EMBEDDING:
      *metadata.add_outputs() = Tensor(kEmbeddingOutput, "FP32", {-1, model.embedding_dimension()});
      break;
    case v1::CLASSIFICATION:
      *metadata.add_outputs() = Tensor(kProbabilitiesOutput, "FP32", {-1, model.labels_size()});
      *metadata.add_outputs() = Tensor(kLabelOutput, "BYTES", {-1});
      break;
    case v1::TRANSLATION:
      *metadata.add_outputs() = Tensor(kTranslationOutput, "BYTES", {-1});
      *metadata.add_outputs() = Tensor(kScoreOutput, "FP32", {-1});
      break;
    default: break;
  }
  return metadata;
}

absl::Status MissingModelName(const v1::ListModelsResponse& models) {
  std::vector<std::string> ready;
  for (const auto& model : models.models()) {
    if (model.state() == v1::READY) ready.push_back(model.name());
  }
  return absl::InvalidArgumentError(absl::StrCat("model_name is empty; loaded models: ", absl::StrJoin(ready, ", ")));
}

}  // namespace odeserve::rpc::oip
