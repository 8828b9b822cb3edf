#include "tests/e2e/server_process.h"

#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <random>
#include <sstream>
#include <stdexcept>
#include <thread>

namespace odeserve::testing {
namespace fs = std::filesystem;

namespace {

std::string ReadAll(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

int ParsePort(const std::string& text, const std::string& key) {
  const size_t at = text.find(key + "=");
  return at == std::string::npos ? 0 : std::stoi(text.substr(at + key.size() + 1));
}

}  // namespace

fs::path CopyToTemp(const fs::path& from, const std::string& tag) {
  std::random_device random;
  const fs::path to = fs::temp_directory_path() / ("odeserve-" + tag + "-" + std::to_string(random()));
  fs::create_directories(to);
  fs::copy(from, to, fs::copy_options::recursive);
  return to;
}

void EditConfig(const fs::path& model_dir, const std::string& from, const std::string& to) {
  const fs::path file = model_dir / "config.pbtxt";
  std::string text = ReadAll(file);
  const size_t at = text.find(from);
  if (at == std::string::npos) throw std::runtime_error("'" + from + "' not in " + file.string());
  text.replace(at, from.size(), to);
  std::ofstream(file) << text;
}

void CopyModel(const fs::path& repository, const std::string& from, const std::string& to,
               const std::vector<std::pair<std::string, std::string>>& edits) {
  fs::copy(repository / from, repository / to, fs::copy_options::recursive);
  EditConfig(repository / to, "name: \"" + from + "\"", "name: \"" + to + "\"");
  for (const auto& [before, after] : edits) EditConfig(repository / to, before, after);
}

void SuiteServer::Start(const std::string& binary, fs::path repository, std::vector<std::string> extra_flags) {
  repository_ = std::move(repository);
  server_ = std::make_unique<ServerProcess>(binary, repository_, std::move(extra_flags));
  ASSERT_TRUE(server_->ok()) << server_->log();
}

void SuiteServer::Stop() {
  if (server_ != nullptr) {
    EXPECT_EQ(server_->Terminate(), 0) << server_->log();
    server_.reset();
  }
  std::error_code ec;
  if (!repository_.empty()) fs::remove_all(repository_, ec);
}

ServerProcess::ServerProcess(const std::string& binary, const fs::path& repository,
                             std::vector<std::string> extra_flags) {
  std::random_device random;
  dir_ = fs::temp_directory_path() / ("odeserve-server-" + std::to_string(random()));
  fs::create_directories(dir_);
  const fs::path port_file = dir_ / "ports";
  std::vector<std::string> args = {binary, "--model_repository=" + repository.string(),
                                   "--grpc_address=127.0.0.1", "--grpc_port=0",
                                   "--metrics_address=127.0.0.1", "--metrics_port=0",
                                   "--port_file=" + port_file.string(), "--drain_timeout=10s"};
  args.insert(args.end(), extra_flags.begin(), extra_flags.end());
  pid_ = fork();
  if (pid_ == 0) {
    const std::string log = (dir_ / "stderr").string();
    freopen(log.c_str(), "w", stderr);
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    _exit(127);
  }
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (std::chrono::steady_clock::now() < give_up) {
    if (fs::exists(port_file)) {
      const std::string text = ReadAll(port_file);
      grpc_port_ = ParsePort(text, "grpc_port");
      metrics_port_ = ParsePort(text, "metrics_port");
      return;
    }
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      if (WIFEXITED(status)) startup_exit_code_ = WEXITSTATUS(status);
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

ServerProcess::~ServerProcess() {
  if (pid_ > 0) {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
  std::error_code ec;
  fs::remove_all(dir_, ec);
}

std::shared_ptr<grpc::Channel> ServerProcess::channel() const {
  return grpc::CreateChannel(address(), grpc::InsecureChannelCredentials());
}

std::unique_ptr<v1::Inference::Stub> ServerProcess::stub() const { return v1::Inference::NewStub(channel()); }

int ServerProcess::Terminate(std::chrono::seconds timeout) {
  if (pid_ <= 0) return -1;
  kill(pid_, SIGTERM);
  const auto give_up = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < give_up) {
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return -1;
}

std::string ServerProcess::log() const { return ReadAll(dir_ / "stderr"); }

std::string HttpGet(int port, const std::string& path) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  inet_pton(AF_INET, "127.0.0.1", &address.sin_addr);
  std::string response;
  if (connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0) {
    const std::string request = "GET " + path + " HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n";
    send(fd, request.data(), request.size(), 0);
    char buffer[8192];
    for (ssize_t n; (n = recv(fd, buffer, sizeof(buffer), 0)) > 0;) response.append(buffer, n);
  }
  close(fd);
  return response;
}

void RemoveModelsExcept(const fs::path& repository, const std::string& keep) {
  std::vector<fs::path> remove;
  for (const auto& folder : fs::directory_iterator(repository)) {
    if (folder.is_directory() && folder.path().filename() != keep) remove.push_back(folder.path());
  }
  for (const auto& folder : remove) fs::remove_all(folder);
}

}  // namespace odeserve::testing
