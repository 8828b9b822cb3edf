#pragma once
// A fixed set of named threads running queued tasks in arrival order, with a bound on how many
// may wait. The request pipeline tokenizes and plans calls here, off gRPC's threads: gRPC 1.51
// runs callback handlers on a small shared pool, so a handler busy tokenizing delays every other
// call on the server, health checks included.

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"

namespace odeserve {

struct TaskPoolOptions {
  std::string name = "odeserve-pool";  // the threads' name (cut to 15 bytes)
  int threads = 1;                     // >= 1
  size_t max_waiting = 1024;           // tasks queued and not yet started; >= 1
};

class TaskPool {
 public:
  explicit TaskPool(TaskPoolOptions options);
  /// Runs every task already accepted, then joins the threads.
  ~TaskPool();
  TaskPool(const TaskPool&) = delete;
  TaskPool& operator=(const TaskPool&) = delete;

  /// Queues `task` for the next free thread; RESOURCE_EXHAUSTED (nothing queued) when
  /// max_waiting tasks are already waiting.
  absl::Status Post(std::function<void()> task);

  int threads() const { return static_cast<int>(threads_.size()); }
  size_t max_waiting() const { return options_.max_waiting; }
  /// Tasks queued and not yet started.
  size_t waiting() const;

 private:
  void Work();

  const TaskPoolOptions options_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::function<void()>> queue_;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace odeserve
