// odeserve: serves parameter-shared encoders over gRPC, choosing ODE solver steps per request.
//
// Start-up: metrics exposer, gRPC server (health "" SERVING, odeserve.v1.Inference NOT_SERVING),
// model loading, then readiness. SIGTERM/SIGINT: health NOT_SERVING, new calls UNAVAILABLE,
// in-flight calls finish within --drain_timeout, exit 0.

#include <signal.h>

#include <csignal>
#include <cstdlib>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <thread>
#include <vector>

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/server_posix.h>
#include <torch/version.h>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "server/common/log.h"
#include "server/common/signal_wait.h"
#include "server/core/inference_core.h"
#include "server/core/model_manager.h"
#include "server/metrics/metrics.h"
#include "server/rpc/connection_acceptor.h"
#include "server/rpc/inference_service.h"
#include "server/rpc/listener_watchdog.h"
#include "server/rpc/malformed_request.h"
#include "server/rpc/open_inference_service.h"
#include "server/rpc/security.h"
#include "server/runtime/allocator.h"
#include "server/runtime/threading.h"

ABSL_FLAG(std::string, grpc_address, "0.0.0.0", "Address the gRPC server binds.");
ABSL_FLAG(int, grpc_port, 8500, "gRPC port (0 = pick a free one; see --port_file).");
ABSL_FLAG(std::string, metrics_address, "0.0.0.0", "Address the /metrics HTTP server binds.");
ABSL_FLAG(int, metrics_port, 8501, "HTTP port of /metrics (0 = pick a free one; -1 = off).");
ABSL_FLAG(std::string, model_repository, "",
          "Model repository folder (default: the bundled models/repository).");
ABSL_FLAG(std::string, device, "cpu", "Device for every model: cpu, cuda or cuda:N.");
ABSL_FLAG(int, intra_op_threads, 0, "LibTorch intra-op threads (0 = one per CPU).");
ABSL_FLAG(int, parallel_min_tokens, odeserve::runtime::kDefaultParallelMinTokens,
          "Model calls over fewer padded tokens run on one intra-op thread (0 = all threads always).");
ABSL_FLAG(bool, row_parallel, true,
          "Float32 CPU models split large calls' rows across the intra-op threads, one thread each "
          "(their matrix products run on one OpenBLAS thread, so that is how they use every core).");
ABSL_FLAG(bool, blas_parallel, true,
          "Float32 CPU calls that cannot split their rows run their matrix products on OpenBLAS "
          "threads (one per intra-op thread); needs --compute_slots=1 (OpenBLAS's count is process-wide).");
ABSL_FLAG(bool, malloc_retain, true,
          "Keep freed heap memory for reuse (glibc mmap threshold 32 MiB, trim threshold 256 MiB): "
          "otherwise a model call's large temporaries are faulted back in on every call. Left alone "
          "when GLIBC_TUNABLES, MALLOC_* or LD_PRELOAD configure the allocator.");
ABSL_FLAG(absl::Duration, heap_release_interval, absl::Seconds(10),
          "With --malloc_retain, how often the heap's free pages go back to the kernel (0 = never): "
          "bounds what retention and fragmentation hold under changing load. Each release holds "
          "the allocator while it walks the heap (3-26 ms under 3x overload on 2 vCPUs).");
ABSL_FLAG(int, compute_slots, 1, "Batches computing at once across all models.");
ABSL_FLAG(absl::Duration, budget_reserve, absl::ZeroDuration(),
          "Part of every latency budget (or deadline) kept for the time the server cannot see: the "
          "network, gRPC and the client. Steps are chosen to finish within the budget less this.");
ABSL_FLAG(bool, calibrate, true, "Calibrate each model's cost model with a warm-up at load.");
ABSL_FLAG(bool, native_fields, true,
          "Evaluate a shared block the module declares (attribute native_field: pre_ln, albert_post_ln) "
          "with direct ATen calls instead of the TorchScript interpreter; checked against the script at load.");
ABSL_FLAG(absl::Duration, drain_timeout, absl::Seconds(20),
          "On SIGTERM, how long in-flight calls may take to finish.");
ABSL_FLAG(std::string, tls_cert, "", "PEM certificate chain: serve gRPC over TLS.");
ABSL_FLAG(std::string, tls_key, "", "PEM private key for --tls_cert.");
ABSL_FLAG(std::string, tls_client_ca, "", "PEM CA bundle: require client certificates (mutual TLS).");
ABSL_FLAG(std::string, auth_tokens_file, "",
          "Bearer tokens, one per line: Inference calls need 'authorization: Bearer <token>'.");
ABSL_FLAG(int64_t, max_text_bytes, 65536,
          "The most bytes of one input any model reads; each model's own limit is 32 bytes per token "
          "of its max_sequence_length, within this. Longer inputs are refused (truncate=false) or cut "
          "there before tokenizing (truncate=true). docs/LIMITS.md.");
ABSL_FLAG(int64_t, max_call_work, 1000000,
          "The most token field evaluations one call may cost (input tokens x encoder field "
          "evaluations, plus inputs x beam x output positions x decoder steps for translation); "
          "a call over it is refused with INVALID_ARGUMENT before it is queued. docs/LIMITS.md.");
ABSL_FLAG(int, tokenization_threads, 0,
          "Threads that tokenize and plan calls, off gRPC's own threads (0 = one per CPU core).");
ABSL_FLAG(int64_t, max_tokenization_queue, 4096,
          "Calls that may wait for a tokenization thread; one more is refused with RESOURCE_EXHAUSTED.");
ABSL_FLAG(int, completion_threads, 1,
          "Threads that fill the responses of finished calls, record their metrics and answer them "
          "(0 = each model's batcher thread, between its steps).");
ABSL_FLAG(int64_t, max_request_bytes, 4 << 20,
          "The largest request message gRPC receives (RESOURCE_EXHAUSTED above it, before parsing).");
ABSL_FLAG(int, max_concurrent_streams, 1024,
          "Calls one client connection may have open at once (HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS); "
          "a client queues the rest itself.");
ABSL_FLAG(absl::Duration, listener_check_interval, absl::Seconds(5),
          "With TLS: how often a loopback connection checks that gRPC's listener still accepts (0 = "
          "never). After 3 failed checks in a row the server turns NOT_SERVING and exits 3, for its "
          "supervisor to restart it (gRPC 1.51 stops accepting for good after running out of file "
          "descriptors). A plaintext port is accepted by odeserve itself, which never stops.");
ABSL_FLAG(std::string, port_file, "",
          "If set, write 'grpc_port=N\\nmetrics_port=M\\n' here once serving (for tests).");

namespace odeserve {
namespace {

constexpr char kServiceName[] = "odeserve.v1.Inference";
// Failed listener checks in a row before the server gives up, and its exit code then.
constexpr int kListenerChecksBeforeExit = 3;
constexpr int kListenerDeadExitCode = 3;

std::filesystem::path DefaultRepository() {
  std::error_code ec;
  const auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    const auto installed = exe.parent_path().parent_path() / "share/odeserve/models/repository";
    if (std::filesystem::is_directory(installed, ec)) return installed;
  }
  return ODESERVE_SOURCE_REPOSITORY;
}

int Run() {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  // Blocked before any thread starts, so every thread inherits the mask and only sigwait sees them.
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  if (absl::GetFlag(FLAGS_intra_op_threads) < 0 || absl::GetFlag(FLAGS_parallel_min_tokens) < 0) {
    LogError(absl::StrCat("--intra_op_threads (", absl::GetFlag(FLAGS_intra_op_threads), ") and --parallel_min_tokens (",
                          absl::GetFlag(FLAGS_parallel_min_tokens), ") must be >= 0"));
    return 1;
  }
  const absl::Duration budget_reserve = absl::GetFlag(FLAGS_budget_reserve);
  if (budget_reserve < absl::ZeroDuration()) {
    LogError(absl::StrCat("--budget_reserve must be >= 0, got ", absl::FormatDuration(budget_reserve)));
    return 1;
  }
  const runtime::AllocatorReport allocator = runtime::ConfigureAllocator(absl::GetFlag(FLAGS_malloc_retain));
  const runtime::ThreadingReport threading = runtime::ConfigureThreading(absl::GetFlag(FLAGS_intra_op_threads),
                                                                              absl::GetFlag(FLAGS_parallel_min_tokens),
                                                                              absl::GetFlag(FLAGS_row_parallel),
                                                                              absl::GetFlag(FLAGS_blas_parallel) &&
                                                                                  absl::GetFlag(FLAGS_compute_slots) == 1);
  LogInfo(absl::StrCat("odeserve ", ODESERVE_VERSION, " (", ODESERVE_COMMIT, ") libtorch ", TORCH_VERSION,
                       "; ", threading.summary(), "; ", allocator.summary));
  // Every connection costs a descriptor, and gRPC 1.51's listener dies on the first accept that
  // finds none left: take all the kernel allows.
  LogInfo(rpc::RaiseOpenFileLimit());

  metrics::Metrics metrics({ODESERVE_VERSION, ODESERVE_COMMIT, TORCH_VERSION});
  int metrics_port = -1;
  if (absl::GetFlag(FLAGS_metrics_port) >= 0) {
    if (auto status = metrics.StartExposer(absl::GetFlag(FLAGS_metrics_address), absl::GetFlag(FLAGS_metrics_port));
        !status.ok()) {
      LogError(status.ToString());
      return 1;
    }
    metrics_port = metrics.exposer_port();
    LogInfo(absl::StrCat("metrics on http://", absl::GetFlag(FLAGS_metrics_address), ":", metrics_port, "/metrics"));
  }

  const int64_t max_text_bytes = absl::GetFlag(FLAGS_max_text_bytes);
  const int64_t max_request_bytes = absl::GetFlag(FLAGS_max_request_bytes);
  if (max_text_bytes < 1 || max_request_bytes < 1 || max_request_bytes > std::numeric_limits<int>::max() ||
      absl::GetFlag(FLAGS_max_concurrent_streams) < 1) {
    LogError(absl::StrCat("--max_text_bytes (", max_text_bytes, ") and --max_concurrent_streams (",
                          absl::GetFlag(FLAGS_max_concurrent_streams), ") must be >= 1 and --max_request_bytes (",
                          max_request_bytes, ") in [1, ", std::numeric_limits<int>::max(), "]"));
    return 1;
  }
  const int64_t max_call_work = absl::GetFlag(FLAGS_max_call_work);
  if (max_call_work < 1) {
    LogError(absl::StrCat("--max_call_work must be >= 1, got ", max_call_work));
    return 1;
  }

  int tokenization_threads = absl::GetFlag(FLAGS_tokenization_threads);
  const int64_t max_tokenization_queue = absl::GetFlag(FLAGS_max_tokenization_queue);
  if (tokenization_threads < 0 || max_tokenization_queue < 1) {
    LogError(absl::StrCat("--tokenization_threads (", tokenization_threads, ") must be >= 0 and --max_tokenization_queue (",
                          max_tokenization_queue, ") >= 1"));
    return 1;
  }
  if (tokenization_threads == 0) tokenization_threads = std::max(1u, std::thread::hardware_concurrency());
  const int completion_threads = absl::GetFlag(FLAGS_completion_threads);
  if (completion_threads < 0) {
    LogError(absl::StrCat("--completion_threads must be >= 0, got ", completion_threads));
    return 1;
  }

  std::filesystem::path repository = absl::GetFlag(FLAGS_model_repository);
  if (repository.empty()) repository = DefaultRepository();
  core::ModelManager models({repository, absl::GetFlag(FLAGS_device), absl::GetFlag(FLAGS_compute_slots),
                             absl::GetFlag(FLAGS_calibrate), absl::GetFlag(FLAGS_native_fields), &metrics});
  core::InferenceCore inference(&models, &metrics,
                                {budget_reserve, max_text_bytes, max_call_work, tokenization_threads,
                                 static_cast<size_t>(max_tokenization_queue), completion_threads});
  std::unique_ptr<rpc::BearerTokenAuth> auth;
  if (const std::string tokens = absl::GetFlag(FLAGS_auth_tokens_file); !tokens.empty()) {
    auto loaded = rpc::BearerTokenAuth::FromFile(tokens);
    if (!loaded.ok()) {
      LogError(loaded.status().ToString());
      return 1;
    }
    auth = *std::move(loaded);
  }
  rpc::InferenceService service(&inference, auth.get());

  auto credentials = rpc::MakeServerCredentials(
      {absl::GetFlag(FLAGS_tls_cert), absl::GetFlag(FLAGS_tls_key), absl::GetFlag(FLAGS_tls_client_ca)});
  if (!credentials.ok()) {
    LogError(credentials.status().ToString());
    return 1;
  }
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  int grpc_port = 0;
  const std::string grpc_address = absl::StrCat(absl::GetFlag(FLAGS_grpc_address), ":", absl::GetFlag(FLAGS_grpc_port));
  // Plaintext: odeserve accepts the connections and hands them to gRPC, since gRPC 1.51's own
  // listener stops accepting for good once descriptors ran out. TLS needs gRPC's listener (1.51
  // adds secure connections from a descriptor to no server); the listener check guards it.
  const bool plaintext = absl::GetFlag(FLAGS_tls_cert).empty();
  std::unique_ptr<rpc::ConnectionAcceptor> acceptor;
  if (plaintext) {
    auto listening = rpc::ConnectionAcceptor::Listen({absl::GetFlag(FLAGS_grpc_address), absl::GetFlag(FLAGS_grpc_port)});
    if (!listening.ok()) {
      LogError(absl::StrCat("cannot listen for gRPC on ", grpc_address, ": ", listening.status().message()));
      return 1;
    }
    acceptor = *std::move(listening);
    grpc_port = acceptor->port();
  } else {
    builder.AddListeningPort(grpc_address, *credentials, &grpc_port);
  }
  // gRPC sets SO_REUSEPORT by default, so a second server on a busy port would start and share
  // (steal) its connections; without it the bind fails and start-up stops with exit 1.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  // gRPC refuses a larger request before parsing it (RESOURCE_EXHAUSTED), so no call makes the
  // server hold or tokenize more than this.
  builder.SetMaxReceiveMessageSize(static_cast<int>(max_request_bytes));
  builder.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS, absl::GetFlag(FLAGS_max_concurrent_streams));
  builder.RegisterService(&service);
  // Requests gRPC cannot parse get INVALID_ARGUMENT naming the problem, counted, with
  // libprotobuf's log lines bounded (gRPC alone answers UNIMPLEMENTED, uncounted).
  rpc::InstallProtobufLogHandler();
  std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> interceptors;
  interceptors.push_back(rpc::MakeMalformedRequestInterceptorFactory(&inference));
  builder.experimental().SetInterceptorCreators(std::move(interceptors));
  // Open Inference Protocol (KServe v2) on the same port, through the same core: docs/OPEN_INFERENCE.md.
  rpc::OpenInferenceService open_inference(&inference, auth.get(), ODESERVE_VERSION);
  builder.RegisterService(&open_inference);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || grpc_port == 0) {
    LogError(absl::StrCat("cannot listen for gRPC on ", grpc_address, " (is the port in use?)"));
    return 1;
  }
  if (acceptor) acceptor->Start([server = server.get()](int fd) { grpc::AddInsecureChannelFromFd(server, fd); });
  auto* health = server->GetHealthCheckService();
  health->SetServingStatus("", true);
  health->SetServingStatus(kServiceName, false);
  LogInfo(absl::StrCat("gRPC listening on ", absl::GetFlag(FLAGS_grpc_address), ":", grpc_port,
                       "; loading models from ", repository.string()));
  // gRPC's own listener (TLS) that stopped accepting (1.51, after running out of descriptors)
  // never recovers: say so, and exit non-zero for the supervisor to restart the server.
  std::unique_ptr<rpc::ListenerWatchdog> listener_watchdog;
  if (const absl::Duration interval = absl::GetFlag(FLAGS_listener_check_interval);
      !plaintext && interval > absl::ZeroDuration()) {
    rpc::ListenerCheckOptions check{grpc_port, rpc::FindListeningSockets(grpc_port),
                                    rpc::ProbeHostFor(absl::GetFlag(FLAGS_grpc_address))};
    listener_watchdog = std::make_unique<rpc::ListenerWatchdog>(
        std::move(check), interval, kListenerChecksBeforeExit, [health, &inference](const std::string& reason) {
          LogError(absl::StrCat("the gRPC listener accepts no connections: ", reason, "; exiting with code ",
                                kListenerDeadExitCode, " to be restarted"));
          inference.StartDraining();
          health->Shutdown();  // NOT_SERVING on connections that are still open
          const absl::Time give_up = absl::Now() + absl::GetFlag(FLAGS_drain_timeout);
          while (inference.in_flight() > 0 && absl::Now() < give_up) absl::SleepFor(absl::Milliseconds(5));
          std::_Exit(kListenerDeadExitCode);
        });
  }

  if (auto status = models.LoadAll(); !status.ok()) {
    LogError(absl::StrCat("cannot load the model repository: ", status.ToString()));
    server->Shutdown();
    return 1;
  }
  runtime::ReleaseFreeHeapMemory();
  inference.SetReady();
  const size_t ready_models = models.ReadyModelNames().size();
  // Readiness means some model answers: with none READY every inference call would fail, so
  // the Inference service stays NOT_SERVING (ListModels still says why each model failed).
  health->SetServingStatus(kServiceName, ready_models > 0);
  const std::string serving = absl::StrCat("serving ", ready_models, " of ", models.List().size(), " models");
  if (ready_models > 0) {
    LogInfo(serving);
  } else {
    LogError(absl::StrCat(serving, ": health for ", kServiceName, " stays NOT_SERVING"));
  }

  if (const std::string port_file = absl::GetFlag(FLAGS_port_file); !port_file.empty()) {
    const std::string tmp = port_file + ".tmp";
    std::ofstream(tmp) << "grpc_port=" << grpc_port << "\nmetrics_port=" << metrics_port << "\n";
    std::filesystem::rename(tmp, port_file);  // atomic: readers never see half a file
  }

  const int signal_number =
      WaitForSignal(signals, allocator.retaining ? absl::GetFlag(FLAGS_heap_release_interval) : absl::ZeroDuration(),
                    runtime::ReleaseFreeHeapMemory);
  // The drain is already bounded by --drain_timeout; a repeated SIGTERM (some orchestrators and
  // impatient users send two) must not kill the process halfway through it.
  std::signal(SIGTERM, SIG_IGN);
  std::signal(SIGINT, SIG_IGN);
  const absl::Duration drain_timeout = absl::GetFlag(FLAGS_drain_timeout);
  LogInfo(absl::StrCat("signal ", signal_number, ": draining (", inference.in_flight(),
                       " calls in flight, timeout ", absl::FormatDuration(drain_timeout), ")"));
  // Refuse new calls first: a client that sees NOT_SERVING and calls anyway must get UNAVAILABLE.
  inference.StartDraining();
  health->Shutdown();  // every service NOT_SERVING, Watch streams told so
  const absl::Time give_up = absl::Now() + drain_timeout;
  while (inference.in_flight() > 0 && absl::Now() < give_up) absl::SleepFor(absl::Milliseconds(5));
  const int abandoned = inference.in_flight();
  // What is left is quick (the last writes of finished calls, health's NOT_SERVING to Watch
  // streams, health checks, GetModel) or open ended (Watch streams, reflection): a short grace,
  // never past the drain timeout. New calls still get UNAVAILABLE meanwhile. Waiting for
  // give_up here kept the process up for the whole drain timeout whenever a client watched health.
  constexpr absl::Duration kShutdownGrace = absl::Milliseconds(500);
  absl::SleepFor(std::min(give_up, absl::Now() + kShutdownGrace) - absl::Now());
  if (abandoned > 0) {
    LogWarning(absl::StrCat(abandoned, " calls were still running at the drain timeout; their clients get UNAVAILABLE"));
  } else {
    models.StopAll();  // nothing is queued: the batchers just end
  }
  LogInfo("stopped");
  // No grpc::Server::Shutdown: once it has begun, gRPC 1.51 kills every call that still reaches
  // the server (clients send until they have read its GOAWAY) and the client sees CANCELLED,
  // which it does not retry. Ending the process closes every connection instead: a call the
  // server did not answer fails UNAVAILABLE at the client, which retries it elsewhere. Every call
  // up to here was answered, or refused with UNAVAILABLE by the draining core.
  std::_Exit(0);
}

}  // namespace
}  // namespace odeserve

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage("odeserve --model_repository DIR [--grpc_port 8500] [--metrics_port 8501] [--device cpu]");
  absl::ParseCommandLine(argc, argv);
  return odeserve::Run();
}
