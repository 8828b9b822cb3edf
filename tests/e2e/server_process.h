#pragma once
// Starts the real odeserve binary on loopback ephemeral ports for end-to-end tests, and stops
// it with SIGTERM like an orchestrator would.

#include <sys/types.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "odeserve/v1/inference.grpc.pb.h"

namespace odeserve::testing {

class ServerProcess {
 public:
  /// Starts `binary` on `repository` with extra flags; waits until it serves (or fails).
  ServerProcess(const std::string& binary, const std::filesystem::path& repository,
                std::vector<std::string> extra_flags = {});
  ~ServerProcess();

  bool ok() const { return grpc_port_ > 0; }
  /// When the process exited before it served: its exit status (-1 otherwise, or if killed).
  int startup_exit_code() const { return startup_exit_code_; }
  std::string address() const { return "127.0.0.1:" + std::to_string(grpc_port_); }
  int metrics_port() const { return metrics_port_; }
  std::shared_ptr<grpc::Channel> channel() const;
  std::unique_ptr<v1::Inference::Stub> stub() const;

  /// SIGTERM, then waits for exit; returns the exit status (or -1 on timeout / signal death).
  int Terminate(std::chrono::seconds timeout = std::chrono::seconds(30));
  /// The server's stderr so far.
  std::string log() const;
  pid_t pid() const { return pid_; }

 private:
  pid_t pid_ = -1;
  int grpc_port_ = 0;
  int metrics_port_ = 0;
  int startup_exit_code_ = -1;
  std::filesystem::path dir_;
};

/// HTTP GET on 127.0.0.1:port; returns the whole response (status line, headers, body).
std::string HttpGet(int port, const std::string& path);

/// Copies `from` to a fresh temporary folder and returns it.
std::filesystem::path CopyToTemp(const std::filesystem::path& from, const std::string& tag);

/// Rewrites `model_dir/config.pbtxt` by replacing `from` with `to` (must occur).
void EditConfig(const std::filesystem::path& model_dir, const std::string& from, const std::string& to);

/// Removes every model folder of `repository` but `keep`.
void RemoveModelsExcept(const std::filesystem::path& repository, const std::string& keep);

/// Copies the model folder `from` of `repository` to a new model `to` (its config's name
/// changed), then applies each (from, to) replacement of `edits` to the copy's config.pbtxt.
void CopyModel(const std::filesystem::path& repository, const std::string& from, const std::string& to,
               const std::vector<std::pair<std::string, std::string>>& edits = {});

/// One server shared by a test suite: Start() in SetUpTestSuite, Stop() in TearDownTestSuite,
/// which checks that the server drains and exits 0 and deletes the repository it was given.
class SuiteServer {
 public:
  void Start(const std::string& binary, std::filesystem::path repository, std::vector<std::string> extra_flags = {});
  void Stop();
  bool ok() const { return server_ != nullptr && server_->ok(); }
  ServerProcess* operator->() const { return server_.get(); }

 private:
  std::filesystem::path repository_;
  std::unique_ptr<ServerProcess> server_;
};

}  // namespace odeserve::testing
