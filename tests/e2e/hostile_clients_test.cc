// Hostile and careless clients against the real binary over loopback: requests whose bytes are
// not a valid protobuf message of their method's type, and calls whose work is over the
// per-call limit. Each is refused with INVALID_ARGUMENT naming the problem, counted, and the
// server keeps serving everyone else. (The other probed defects have their tests beside the
// feature they exercise: tests/e2e/server_e2e_test.cc's ServerLifecycle suite and
// tests/server/metrics_test.cc's stalled-client tests.)

#include <filesystem>
#include <future>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include <gmock/gmock.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include "grpc/health/v1/health.grpc.pb.h"
#include "odeserve/v1/inference.grpc.pb.h"
#include "tests/e2e/server_process.h"

namespace odeserve {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

class HostileClientsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    server_.Start(ODESERVE_BINARY, testing::CopyToTemp(ODESERVE_TEST_REPOSITORY, "hostile-repo"));
  }
  static void TearDownTestSuite() { server_.Stop(); }
  void SetUp() override { ASSERT_TRUE(server_.ok()); }

  // A unary call of `method` whose request is `bytes` as they are, parsed or not.
  static grpc::Status RawCall(const std::string& method, const std::string& bytes) {
    grpc::GenericStub stub(server_->channel());
    grpc::Slice slice(bytes);
    grpc::ByteBuffer request(&slice, 1);
    grpc::ByteBuffer response;
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
    std::promise<grpc::Status> done;
    stub.UnaryCall(&context, method, grpc::StubOptions(), &request, &response,
                   [&done](grpc::Status status) { done.set_value(std::move(status)); });
    return done.get_future().get();
  }

  static grpc::Status Embed(const std::string& text) {
    v1::EmbedRequest request;
    request.set_model("tiny-albert");
    request.add_inputs(text);
    v1::EmbedResponse response;
    grpc::ClientContext context;
    return server_->stub()->Embed(&context, request, &response);
  }

  // EmbedRequest for tiny-albert whose one input is `input` as raw bytes (a serializer would
  // refuse invalid UTF-8).
  static std::string EmbedRequestBytes(const std::string& input) {
    v1::EmbedRequest request;
    request.set_model("tiny-albert");
    std::string bytes = request.SerializeAsString();
    bytes.push_back(static_cast<char>((v1::EmbedRequest::kInputsFieldNumber << 3) | 2));
    bytes.push_back(static_cast<char>(input.size()));  // < 128: a one-byte varint
    return bytes + input;
  }

  static testing::SuiteServer server_;
};

testing::SuiteServer HostileClientsTest::server_;

TEST_F(HostileClientsTest, GarbageBytesGetInvalidArgumentNamingTheMethodOnEveryService) {
  const std::string garbage = "\xff\xff\xff\xff\xff";  // a varint that never ends
  for (const std::string method :
       {"/odeserve.v1.Inference/Embed", "/odeserve.v1.Inference/Classify", "/odeserve.v1.Inference/Translate",
        "/odeserve.v1.Inference/GetModel", "/inference.GRPCInferenceService/ModelInfer",
        "/inference.GRPCInferenceService/ModelMetadata"}) {
    const grpc::Status status = RawCall(method, garbage);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << method << ": " << status.error_message();
    EXPECT_THAT(status.error_message(),
                AllOf(HasSubstr(method.substr(1)), HasSubstr("not a valid protobuf message"),
                      HasSubstr("truncated or malformed bytes")));
  }
  // gRPC's own health service parses its requests itself and says so.
  const grpc::Status health = RawCall("/grpc.health.v1.Health/Check", garbage);
  EXPECT_EQ(health.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << health.error_message();
  EXPECT_THAT(health.error_message(), HasSubstr("could not parse request"));
}

TEST_F(HostileClientsTest, TruncatedMessagesAndHugeLengthPrefixesAreRefused) {
  v1::EmbedRequest request;
  request.set_model("tiny-albert");
  request.add_inputs("a sentence long enough to cut");
  const std::string whole = request.SerializeAsString();
  EXPECT_EQ(RawCall("/odeserve.v1.Inference/Embed", whole).error_code(), grpc::StatusCode::OK);
  const grpc::Status truncated = RawCall("/odeserve.v1.Inference/Embed", whole.substr(0, whole.size() - 3));
  EXPECT_EQ(truncated.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << truncated.error_message();

  // inputs: a length prefix of 2^31 followed by three bytes.
  std::string huge;
  huge.push_back(static_cast<char>((v1::EmbedRequest::kInputsFieldNumber << 3) | 2));
  huge += std::string("\x80\x80\x80\x80\x08", 5) + "abc";
  const grpc::Status prefix = RawCall("/odeserve.v1.Inference/Embed", huge);
  EXPECT_EQ(prefix.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << prefix.error_message();
}

TEST_F(HostileClientsTest, InvalidUtf8InAStringFieldNamesTheField) {
  ASSERT_EQ(RawCall("/odeserve.v1.Inference/Embed", EmbedRequestBytes("fine")).error_code(), grpc::StatusCode::OK);
  const grpc::Status status = RawCall("/odeserve.v1.Inference/Embed", EmbedRequestBytes("bad \xc3\x28 text"));
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << status.error_message();
  EXPECT_THAT(status.error_message(), AllOf(HasSubstr("odeserve.v1.EmbedRequest.inputs"), HasSubstr("UTF-8")));
}

// 400 bad requests from 4 clients: each counted under its method with INVALID_ARGUMENT, a
// handful of log lines instead of 400, and good calls and health answered meanwhile and after.
TEST_F(HostileClientsTest, AFloodOfBadRequestsIsCountedBarelyLoggedAndOthersAreServed) {
  const std::string before_log = server_->log();
  const std::string bad = EmbedRequestBytes("\xff\xfe not UTF-8");
  std::vector<std::thread> clients;
  std::atomic<int> refused{0};
  for (int c = 0; c < 4; ++c) {
    clients.emplace_back([&] {
      for (int i = 0; i < 100; ++i) {
        if (RawCall("/odeserve.v1.Inference/Embed", bad).error_code() == grpc::StatusCode::INVALID_ARGUMENT) ++refused;
      }
    });
  }
  const grpc::Status during = Embed("served while the flood runs");
  for (auto& client : clients) client.join();
  EXPECT_TRUE(during.ok()) << during.error_message();
  EXPECT_EQ(refused.load(), 400);
  EXPECT_TRUE(Embed("served after the flood").ok());
  grpc::health::v1::HealthCheckResponse health;
  grpc::ClientContext health_context;
  health_context.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(500));
  ASSERT_TRUE(grpc::health::v1::Health::NewStub(server_->channel())
                  ->Check(&health_context, grpc::health::v1::HealthCheckRequest(), &health)
                  .ok());
  EXPECT_EQ(health.status(), grpc::health::v1::HealthCheckResponse::SERVING);

  const std::string metrics = testing::HttpGet(server_->metrics_port(), "/metrics");
  std::smatch count;
  ASSERT_TRUE(std::regex_search(
      metrics, count,
      std::regex(R"(odeserve_requests_total\{code="INVALID_ARGUMENT",method="Embed",model=""\} (\d+))")))
      << metrics.substr(0, 4000);
  EXPECT_GE(std::stoi(count[1]), 400);

  const std::string log = server_->log().substr(before_log.size());
  size_t protobuf_lines = 0;
  for (size_t at = log.find("libprotobuf"); at != std::string::npos; at = log.find("libprotobuf", at + 1)) {
    ++protobuf_lines;
  }
  EXPECT_GE(protobuf_lines, 1u) << log;
  EXPECT_LE(protobuf_lines, 10u) << log.substr(0, 4000);
}

// The bundled translator beside tiny-albert, with a per-call work limit of 300,000.
class WorkLimitTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const std::filesystem::path repo = testing::CopyToTemp(ODESERVE_TEST_REPOSITORY, "work-limit-repo");
    std::filesystem::copy(ODESERVE_BUNDLED_TRANSLATOR, repo / "translate-en-de", std::filesystem::copy_options::recursive);
    server_.Start(ODESERVE_BINARY, repo, {"--max_call_work=300000"});
  }
  static void TearDownTestSuite() { server_.Stop(); }
  void SetUp() override { ASSERT_TRUE(server_.ok()); }

  static v1::TranslateRequest Translation(int inputs) {
    v1::TranslateRequest request;
    request.set_model("translate-en-de");
    for (int i = 0; i < inputs; ++i) {
      request.add_inputs("development files for the GNU C library, a tool to compress files and a fast web server");
    }
    request.set_beam_size(8);
    request.set_max_output_tokens(128);
    request.mutable_compute()->set_steps(12);
    request.mutable_compute()->set_decoder_steps(12);
    return request;
  }

  static testing::SuiteServer server_;
};

testing::SuiteServer WorkLimitTest::server_;

// 32 inputs x beam 8 x 128 positions x 12 decoder steps is 393,216 decoder token evaluations
// alone: refused before it is queued, naming the limit, while a 4-input call is served.
TEST_F(WorkLimitTest, ACallOverTheWorkLimitIsRefusedUpFrontNamingIt) {
  v1::TranslateResponse response;
  grpc::ClientContext context;
  const auto started = std::chrono::steady_clock::now();
  const grpc::Status refused = server_->stub()->Translate(&context, Translation(32), &response);
  EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(2)) << "refused only after computing";
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << refused.error_message();
  EXPECT_THAT(refused.error_message(),
              AllOf(HasSubstr("model 'translate-en-de'"), HasSubstr("256 hypotheses (inputs x beam) x 128 output positions"),
                    HasSubstr("limit of 300000 (--max_call_work)")));

  v1::EmbedRequest embed;
  embed.set_model("tiny-albert");
  embed.add_inputs("a short call within the limit");
  embed.mutable_compute()->set_steps(8);
  embed.mutable_compute()->set_solver(v1::RK4);
  v1::EmbedResponse embedded;
  grpc::ClientContext embed_context;
  const grpc::Status served = server_->stub()->Embed(&embed_context, embed, &embedded);
  EXPECT_TRUE(served.ok()) << served.error_message();
}

// The probed attack at small scale: a long translation holds the one compute slot while another
// model is called. The slot changes hands at the translation's next step boundary, so the
// other call is answered long before the translation ends.
TEST_F(WorkLimitTest, ALongTranslationDoesNotHoldUpAnotherModel) {
  auto translation = std::async(std::launch::async, [] {
    v1::TranslateResponse response;
    grpc::ClientContext context;
    return server_->stub()->Translate(&context, Translation(4), &response);
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(500));  // its batch is computing
  ASSERT_EQ(translation.wait_for(std::chrono::seconds(0)), std::future_status::timeout)
      << "the translation ended too soon to hold anything up";
  v1::EmbedRequest embed;
  embed.set_model("tiny-albert");
  embed.add_inputs("a short call to another model");
  v1::EmbedResponse embedded;
  grpc::ClientContext embed_context;
  const auto started = std::chrono::steady_clock::now();
  const grpc::Status status = server_->stub()->Embed(&embed_context, embed, &embedded);
  const auto took = std::chrono::steady_clock::now() - started;
  EXPECT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(translation.wait_for(std::chrono::seconds(0)), std::future_status::timeout)
      << "the embedding waited for the whole translation ("
      << std::chrono::duration_cast<std::chrono::milliseconds>(took).count() << " ms)";
  EXPECT_TRUE(translation.get().ok());
}

}  // namespace
}  // namespace odeserve
