// core/inference_core: the refusals that need loaded models (unknown model, a model that failed
// to load), and where a call's tokenization runs. It must not run on the thread that
// handed the call in (gRPC's, in the server), and a call that waits for a tokenization thread is
// bounded. A tiny real model; the call's own cancellation check is the hook that sees the
// tokenizing thread (the core asks it before each input it tokenizes).

#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <map>
#include <fstream>
#include <iterator>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <pthread.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "server/core/inference_core.h"
#include "server/core/model_manager.h"
#include "server/metrics/metrics.h"

namespace odeserve::core {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

constexpr char kModel[] = "tiny-sharebert";
constexpr char kBroken[] = "broken-sharebert";

// A one-model repository copied from the test repository.
class InferenceCoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    repository_ = fs::temp_directory_path() /
                  ("inference-core-test-" + std::to_string(::getpid()) + "-" +
                   ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(repository_);
    fs::create_directories(repository_);
    fs::copy(fs::path(ODESERVE_TEST_REPOSITORY) / kModel, repository_ / kModel, fs::copy_options::recursive);
    // A copy whose module is not TorchScript: loaded as FAILED.
    fs::copy(repository_ / kModel, repository_ / kBroken, fs::copy_options::recursive);
    {
      std::ifstream in(repository_ / kBroken / "config.pbtxt");
      std::string config((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      config.replace(config.find(kModel), std::string(kModel).size(), kBroken);
      std::ofstream(repository_ / kBroken / "config.pbtxt") << config;
      std::ofstream(repository_ / kBroken / "model.pt") << "not a TorchScript archive";
    }
    metrics_ = std::make_unique<metrics::Metrics>(metrics::BuildInfo{"test", "test", "test"});
    ModelManagerOptions options;
    options.repository = repository_;
    options.calibrate = false;
    options.metrics = metrics_.get();
    models_ = std::make_unique<ModelManager>(options);
    ASSERT_TRUE(models_->LoadAll().ok());
    ASSERT_EQ(models_->ReadyModelNames().size(), 1u);
  }
  void TearDown() override {
    core_.reset();  // runs what its threads still hold, before the models go
    models_.reset();
    fs::remove_all(repository_);
  }
  InferenceCore& Core(int threads, size_t max_queue, int completion_threads = 1) {
    InferenceOptions options;
    options.tokenization_threads = threads;
    options.max_tokenization_queue = max_queue;
    options.completion_threads = completion_threads;
    core_ = std::make_unique<InferenceCore>(models_.get(), metrics_.get(), options);
    core_->SetReady();
    return *core_;
  }

  fs::path repository_;
  std::unique_ptr<metrics::Metrics> metrics_;
  std::unique_ptr<ModelManager> models_;
  std::unique_ptr<InferenceCore> core_;
};

// Holds a call at its first cancellation check (inside tokenization) until released, and
// records the thread that asked. A test waits for Finished() before it ends: the core fills the
// response until then.
class HeldCall {
 public:
  HeldCall() {
    request_.set_model(kModel);
    request_.add_inputs("a short text to tokenize");
    context_.cancelled = [this] {
      std::unique_lock<std::mutex> lock(mutex_);
      if (!asked_on_) {
        asked_on_ = std::this_thread::get_id();
        changed_.notify_all();
        changed_.wait_for(lock, std::chrono::seconds(5), [this] { return released_; });
      }
      return false;
    };
  }
  void Start(InferenceCore& core) {
    core.Embed(context_, request_, &response_, [this](absl::Status status) {
      std::lock_guard<std::mutex> lock(mutex_);
      status_ = std::move(status);
      changed_.notify_all();
    });
  }
  // The thread of the first cancellation check, once one was made (within 5 s).
  std::optional<std::thread::id> AskedOn() {
    std::unique_lock<std::mutex> lock(mutex_);
    changed_.wait_for(lock, std::chrono::seconds(5), [this] { return asked_on_.has_value(); });
    return asked_on_;
  }
  void Release() {
    std::lock_guard<std::mutex> lock(mutex_);
    released_ = true;
    changed_.notify_all();
  }
  // The call's final status (within 10 s).
  std::optional<absl::Status> Finished() {
    std::unique_lock<std::mutex> lock(mutex_);
    changed_.wait_for(lock, std::chrono::seconds(10), [this] { return status_.has_value(); });
    return status_;
  }
  bool finished() {
    std::lock_guard<std::mutex> lock(mutex_);
    return status_.has_value();
  }
  const v1::EmbedResponse& response() const { return response_; }

 private:
  v1::EmbedRequest request_;
  v1::EmbedResponse response_;
  CallContext context_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::optional<std::thread::id> asked_on_;
  bool released_ = false;
  std::optional<absl::Status> status_;
};

TEST_F(InferenceCoreTest, TokenizationRunsOffTheThreadThatHandsTheCallIn) {
  InferenceCore& core = Core(/*threads=*/1, /*max_queue=*/8);
  HeldCall call;
  const auto started = std::chrono::steady_clock::now();
  call.Start(core);  // would block here for 5 s if it tokenized on this thread
  const auto returned_after = std::chrono::steady_clock::now() - started;
  const auto asked_on = call.AskedOn();
  ASSERT_TRUE(asked_on.has_value()) << "the call never reached tokenization";
  EXPECT_NE(*asked_on, std::this_thread::get_id());
  EXPECT_LT(returned_after, std::chrono::seconds(2));
  EXPECT_FALSE(call.finished());
  call.Release();
  const auto status = call.Finished();
  ASSERT_TRUE(status.has_value());
  EXPECT_TRUE(status->ok()) << *status;
  EXPECT_EQ(call.response().embeddings_size(), 1);
}

TEST_F(InferenceCoreTest, ACallBeyondTheTokenizationQueueIsRefusedAtOnceAndTheOthersFinish) {
  InferenceCore& core = Core(/*threads=*/1, /*max_queue=*/1);
  HeldCall busy, waiting, refused;
  busy.Start(core);
  ASSERT_TRUE(busy.AskedOn().has_value());  // the one thread is held
  waiting.Start(core);                      // the one queue place
  refused.Start(core);
  const auto refusal = refused.Finished();
  ASSERT_TRUE(refusal.has_value());
  EXPECT_TRUE(absl::IsResourceExhausted(*refusal)) << *refusal;
  EXPECT_THAT(refusal->message(), HasSubstr("--max_tokenization_queue"));
  busy.Release();
  waiting.Release();
  for (HeldCall* call : {&busy, &waiting}) {
    const auto status = call->Finished();
    ASSERT_TRUE(status.has_value());
    EXPECT_TRUE(status->ok()) << *status;
  }
}

TEST_F(InferenceCoreTest, ACallGivenUpWhileItWaitsForATokenizationThreadEndsCancelledUntokenized) {
  InferenceCore& core = Core(/*threads=*/1, /*max_queue=*/8);
  HeldCall busy;
  busy.Start(core);
  ASSERT_TRUE(busy.AskedOn().has_value());
  v1::EmbedRequest request;
  request.set_model(kModel);
  request.add_inputs("never tokenized");
  v1::EmbedResponse response;
  CallContext gone;
  gone.cancelled = [] { return true; };
  std::mutex mutex;
  std::condition_variable changed;
  std::optional<absl::Status> status;
  core.Embed(gone, request, &response, [&](absl::Status s) {
    std::lock_guard<std::mutex> lock(mutex);
    status = std::move(s);
    changed.notify_all();
  });
  busy.Release();
  std::unique_lock<std::mutex> lock(mutex);
  ASSERT_TRUE(changed.wait_for(lock, std::chrono::seconds(10), [&] { return status.has_value(); }));
  EXPECT_TRUE(absl::IsCancelled(*status)) << *status;
  EXPECT_EQ(response.report().tokens(), 0);
  const auto busy_status = busy.Finished();  // its response must outlive its completion
  ASSERT_TRUE(busy_status.has_value());
  EXPECT_TRUE(busy_status->ok()) << *busy_status;
}

std::string CurrentThreadName() {
  char name[16] = {};
  pthread_getname_np(pthread_self(), name, sizeof(name));
  return name;
}

// One Embed run to completion: its status and the thread that answered it.
struct Answer {
  absl::Status status;
  std::string thread;
};
Answer EmbedNow(InferenceCore& core, const std::string& model) {
  v1::EmbedRequest request;
  request.set_model(model);
  request.add_inputs("text");
  v1::EmbedResponse response;
  std::mutex mutex;
  std::condition_variable changed;
  std::optional<Answer> answer;
  core.Embed(CallContext{}, request, &response, [&](absl::Status status) {
    Answer done{std::move(status), CurrentThreadName()};
    std::lock_guard<std::mutex> lock(mutex);
    answer = std::move(done);
    changed.notify_all();
  });
  std::unique_lock<std::mutex> lock(mutex);
  changed.wait_for(lock, std::chrono::seconds(10), [&] { return answer.has_value(); });
  return answer.value_or(Answer{absl::DeadlineExceededError("no completion within 10 s"), ""});
}

TEST_F(InferenceCoreTest, AnUnknownModelIsNotFoundListingTheLoadedOnes) {
  InferenceCore& core = Core(/*threads=*/1, /*max_queue=*/8);
  const absl::Status status = EmbedNow(core, "no-such-model").status;
  EXPECT_TRUE(absl::IsNotFound(status)) << status;
  EXPECT_THAT(std::string(status.message()),
              HasSubstr("model 'no-such-model' not found; loaded models: tiny-sharebert"));
}

TEST_F(InferenceCoreTest, AModelThatFailedToLoadIsFailedPreconditionSayingWhy) {
  InferenceCore& core = Core(/*threads=*/1, /*max_queue=*/8);
  const absl::Status status = EmbedNow(core, kBroken).status;
  EXPECT_TRUE(absl::IsFailedPrecondition(status)) << status;
  EXPECT_THAT(std::string(status.message()), HasSubstr("model 'broken-sharebert' is not serving: it failed to load"));
  EXPECT_TRUE(EmbedNow(core, kModel).status.ok());  // the other model serves
}

// A lone call is answered by its batcher at once, completion threads or not: with nothing else to
// do the batcher is the quickest way back. (A call whose batcher has more to do goes to a
// completion thread: ModelScheduler.AFinishedCallSaysWhetherTheBatcherHasMoreToDo.)
TEST_F(InferenceCoreTest, ALoneCallIsAnsweredByItsBatcher) {
  for (int completion_threads : {1, 0}) {
    const Answer answer = EmbedNow(Core(/*threads=*/1, /*max_queue=*/8, completion_threads), kModel);
    EXPECT_TRUE(answer.status.ok()) << answer.status;
    EXPECT_EQ(answer.thread, "sched:tiny-shar") << completion_threads << " completion threads";
  }
}

// Many calls at once: some finish while the batcher has more to do, and those are answered on a
// completion thread; without completion threads every call is answered by the batcher.
TEST_F(InferenceCoreTest, UnderLoadCallsAreAnsweredOnACompletionThreadUnlessThereIsNone) {
  for (int completion_threads : {1, 0}) {
    SCOPED_TRACE(completion_threads);
    InferenceCore& core = Core(/*threads=*/2, /*max_queue=*/256, completion_threads);
    constexpr int kCalls = 64;
    std::vector<v1::EmbedRequest> requests(kCalls);
    std::vector<v1::EmbedResponse> responses(kCalls);
    std::mutex mutex;
    std::condition_variable changed;
    std::map<std::string, int> threads;
    int answered = 0;
    for (int i = 0; i < kCalls; ++i) {
      requests[i].set_model(kModel);
      requests[i].add_inputs("a text of a few words, number " + std::to_string(i));
      requests[i].mutable_compute()->set_steps(8);
      core.Embed(CallContext{}, requests[i], &responses[i], [&](absl::Status status) {
        const std::string thread = CurrentThreadName();
        std::lock_guard<std::mutex> lock(mutex);
        ++threads[status.ok() ? thread : status.ToString()];
        ++answered;
        changed.notify_all();
      });
    }
    std::unique_lock<std::mutex> lock(mutex);
    ASSERT_TRUE(changed.wait_for(lock, std::chrono::seconds(30), [&] { return answered == kCalls; }));
    for (const auto& [thread, calls] : threads) {
      EXPECT_TRUE(thread == "sched:tiny-shar" || (completion_threads > 0 && thread == "odeserve-answer"))
          << thread << ": " << calls;
    }
    if (completion_threads > 0) {
      EXPECT_GT(threads["odeserve-answer"], 0);
    }
  }
}

}  // namespace
}  // namespace odeserve::core
