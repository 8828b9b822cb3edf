#include "server/common/task_pool.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "server/common/thread_name.h"

namespace odeserve {

TaskPool::TaskPool(TaskPoolOptions options) : options_(std::move(options)) {
  const int count = std::max(1, options_.threads);
  threads_.reserve(count);
  for (int i = 0; i < count; ++i) threads_.emplace_back([this] { Work(); });
}

TaskPool::~TaskPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  for (auto& thread : threads_) thread.join();
}

absl::Status TaskPool::Post(std::function<void()> task) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (queue_.size() >= std::max<size_t>(1, options_.max_waiting)) {
      return absl::ResourceExhaustedError(
          absl::StrCat(queue_.size(), " tasks already wait for one of ", threads_.size(), " threads"));
    }
    queue_.push_back(std::move(task));
  }
  wake_.notify_one();
  return absl::OkStatus();
}

size_t TaskPool::waiting() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return queue_.size();
}

void TaskPool::Work() {
  NameCurrentThread(options_.name);
  for (;;) {
    std::function<void()> task;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      // Stopping still runs what was accepted: each task owes its caller an answer.
      if (queue_.empty()) return;
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    task();
  }
}

}  // namespace odeserve
