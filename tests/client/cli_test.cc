// odeserve-cli against the in-process fake server.
#include "client/cli/cli_app.h"

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include <grpcpp/security/server_credentials.h>

#include "fake_server.h"
#include "gtest/gtest.h"
#include "python_check.h"

namespace odeserve::client {
namespace {

class CliTest : public ::testing::Test {
 protected:
  int Run(std::vector<std::string> args, const std::string& stdin_text = "") {
    std::istringstream in(stdin_text);
    out_.str("");
    err_.str("");
    options_.connection.address = server_.address();
    if (!options_.deadline) options_.deadline = absl::Seconds(10);
    return RunCli(options_, args, in, out_, err_);
  }
  std::string out() const { return out_.str(); }
  std::string err() const { return err_.str(); }

  testing::FakeServer server_;
  CliOptions options_;
  std::ostringstream out_, err_;
};

TEST_F(CliTest, EmbedHumanOutputWithReport) {
  options_.model = "emb";
  options_.compute.budget = absl::Milliseconds(20);
  ASSERT_EQ(Run({"embed", "hello", "world!"}), 0) << err();
  EXPECT_NE(out().find("[0] dim=4"), std::string::npos) << out();
  EXPECT_NE(out().find("[5.0000, 1.0000, 2.0000, 3.0000]  hello"), std::string::npos) << out();
  EXPECT_NE(out().find("[1] dim=4"), std::string::npos);
  EXPECT_NE(out().find("compute: steps=12 solver=euler"), std::string::npos) << out();
  EXPECT_NE(out().find("(budget)"), std::string::npos) << out();
  EXPECT_NE(out().find("budget 20.00 ms met"), std::string::npos) << out();
  EXPECT_NE(out().find("queue 0.50 ms compute 1.50 ms total 2.00 ms"), std::string::npos) << out();
}

TEST_F(CliTest, ResolvesTheOnlyModelOfTheTask) {
  options_.top_k = 2;
  ASSERT_EQ(Run({"classify", "a library"}), 0) << err();
  EXPECT_NE(out().find("libs"), std::string::npos) << out();
  EXPECT_NE(out().find("python"), std::string::npos) << out();
  EXPECT_EQ(out().find("games"), std::string::npos) << out();
  EXPECT_NE(out().find("model cls |"), std::string::npos) << out();
}

TEST_F(CliTest, ClassifyJsonParses) {
  options_.json = true;
  options_.model = "cls";
  options_.compute.steps = 3;
  options_.compute.solver = "rk4";
  ASSERT_EQ(Run({"classify", "x", "y"}), 0) << err();
  if (!testing::HavePython()) GTEST_SKIP();
  EXPECT_TRUE(testing::IsValidJson(
      out(), "len(d[\"results\"]) == 2 and d[\"results\"][0][\"labels\"][0][\"label\"] == \"libs\" "
             "and d[\"report\"][\"steps\"] == 3 and d[\"report\"][\"solver\"] == \"RK4\" and "
             "d[\"report\"][\"step_choice\"] == \"REQUESTED\""))
      << out();
}

TEST_F(CliTest, ReadsStdinAndInputFile) {
  options_.model = "mt";
  ASSERT_EQ(Run({"translate", "-"}, "first line\n\n \t \r\nsecond line\r\n"), 0) << err();
  EXPECT_NE(out().find("-> de: first line"), std::string::npos) << out();
  EXPECT_NE(out().find("-> de: second line  (score -0.500)"), std::string::npos) << out();
  EXPECT_EQ(out().find("[2]"), std::string::npos) << "blank (and whitespace-only) lines are skipped";

  options_.input_file = testing::WriteTemp("from a file\n", ".txt");
  ASSERT_EQ(Run({"translate"}), 0) << err();
  EXPECT_NE(out().find("-> de: from a file"), std::string::npos) << out();
  options_.input_file = "/nonexistent/inputs.txt";
  EXPECT_EQ(Run({"translate"}), 1);
  EXPECT_NE(err().find("error: NOT_FOUND: cannot open --input_file"), std::string::npos) << err();
}

TEST_F(CliTest, TranslateStreamPrintsTextAsItArrives) {
  options_.model = "mt";
  options_.stream = true;
  ASSERT_EQ(Run({"translate", "ein", "zwei"}), 0) << err();
  EXPECT_EQ(out().find("[0] ... de:\n[0] ... de: ein\n[1] ... de:\n[1] ... de: zwei\n"
                       "[0] = de: ein  (score -0.500)\n[1] = de: zwei  (score -0.500)\nmodel mt | compute:"),
            0u)
      << out();
  options_.model = "emb";
  EXPECT_EQ(Run({"translate", "x"}), 1) << "the stream's error reaches the exit code";
}

TEST_F(CliTest, TranslateStreamJsonIsOneObjectPerLine) {
  options_.model = "mt";
  options_.stream = true;
  options_.json = true;
  ASSERT_EQ(Run({"translate", "ein", "zwei"}), 0) << err();
  const std::string lines = out();
  EXPECT_EQ(std::count(lines.begin(), lines.end(), '\n'), 6) << lines;
  if (!testing::HavePython()) GTEST_SKIP();
  // Each line on its own is a document (JSON Lines); the last two are the final translations.
  EXPECT_TRUE(testing::PythonAccepts(
      out(), ".jsonl",
      "import json, sys; m = [json.loads(l) for l in open(sys.argv[1]).read().splitlines()]; "
      "sys.exit(0 if len(m) == 6 and [x[\"final\"] for x in m] == [False] * 4 + [True] * 2 "
      "and m[5][\"text\"] == \"de: zwei\" and m[5][\"index\"] == 1 else 1)"))
      << out();
}

TEST_F(CliTest, ServerInvalidArgumentExitsTwo) {
  options_.model = "emb";
  EXPECT_EQ(Run({"embed", "ok", ""}), 2);
  EXPECT_EQ(err(), "error: INVALID_ARGUMENT: input 1 is empty\n");
  EXPECT_EQ(out(), "");
}

TEST_F(CliTest, OtherErrorsExitOne) {
  options_.model = "nope";
  EXPECT_EQ(Run({"embed", "x"}), 1);
  EXPECT_EQ(err(), "error: NOT_FOUND: unknown model 'nope'\n");
  options_.model = "cls";
  EXPECT_EQ(Run({"embed", "x"}), 1);
  EXPECT_EQ(err(), "error: FAILED_PRECONDITION: wrong task\n");
}

TEST_F(CliTest, UsageErrors) {
  EXPECT_EQ(Run({}), 2);
  EXPECT_NE(err().find("usage: odeserve-cli"), std::string::npos);
  EXPECT_EQ(Run({"frobnicate"}), 2);
  EXPECT_NE(err().find("unknown command 'frobnicate'"), std::string::npos);
  options_.model = "emb";
  EXPECT_EQ(Run({"embed"}), 2);
  EXPECT_NE(err().find("error: INVALID_ARGUMENT: no inputs"), std::string::npos) << err();
  options_.compute.solver = "midpoint";
  EXPECT_EQ(Run({"embed", "x"}), 2);
  EXPECT_NE(err().find("unknown solver 'midpoint'"), std::string::npos) << err();
  EXPECT_EQ(Run({"model"}), 2);
}

TEST_F(CliTest, ModelsAndModel) {
  ASSERT_EQ(Run({"models"}), 0) << err();
  EXPECT_NE(out().find("NAME"), std::string::npos);
  EXPECT_NE(out().find("emb"), std::string::npos);
  EXPECT_NE(out().find("classification"), std::string::npos) << out();
  EXPECT_NE(out().find("1-24 (12)"), std::string::npos) << out();
  EXPECT_NE(out().find("euler,rk4"), std::string::npos) << out();
  EXPECT_NE(out().find("4.2M"), std::string::npos) << out();

  ASSERT_EQ(Run({"model", "cls"}), 0) << err();
  EXPECT_NE(out().find("labels (3):"), std::string::npos) << out();
  EXPECT_NE(out().find("accuracy"), std::string::npos) << out();
  EXPECT_NE(out().find("0.8100"), std::string::npos) << out();
  EXPECT_EQ(Run({"model", "zzz"}), 1);
  EXPECT_EQ(err(), "error: NOT_FOUND: unknown model 'zzz'\n");
}

TEST_F(CliTest, Health) {
  EXPECT_EQ(Run({"health"}), 0) << err();
  EXPECT_EQ(out(), "(server): SERVING\n");
  EXPECT_EQ(Run({"health", "odeserve.v1.Inference"}), 0) << err();
  EXPECT_EQ(out(), "odeserve.v1.Inference: SERVING\n");
  EXPECT_EQ(Run({"health", "draining.Service"}), 3) << err();
  EXPECT_EQ(out(), "draining.Service: NOT_SERVING\n");
  EXPECT_EQ(Run({"health", "no.Such"}), 1);
  EXPECT_EQ(err().rfind("error: NOT_FOUND", 0), 0u) << err();
  options_.json = true;
  EXPECT_EQ(Run({"health"}), 0);
  EXPECT_NE(out().find("\"status\": \"SERVING\""), std::string::npos) << out();
}

TEST_F(CliTest, SendsBearerToken) {
  options_.connection.token = "s3cret";
  ASSERT_EQ(Run({"models"}), 0) << err();
  EXPECT_EQ(server_.service().last_authorization(), "Bearer s3cret");
  // Over plaintext the token still goes (a sidecar may terminate TLS), but the user is told.
  EXPECT_NE(err().find("warning: the bearer token goes to " + options_.connection.address + " in clear text"),
            std::string::npos) << err();
}

TEST_F(CliTest, DeadlineExceeded) {
  server_.service().delay = std::chrono::milliseconds(200);
  options_.model = "emb";
  options_.deadline = absl::Milliseconds(20);
  EXPECT_EQ(Run({"embed", "x"}), 1);
  EXPECT_EQ(err(), "error: DEADLINE_EXCEEDED: Deadline Exceeded\n");
}

TEST(CliNoServerTest, UnavailableAndTlsFileErrors) {
  CliOptions o;
  o.connection.address = "127.0.0.1:1";
  o.deadline = absl::Seconds(2);
  std::istringstream in;
  std::ostringstream out, err;
  EXPECT_EQ(RunCli(o, {"models"}, in, out, err), 1);
  EXPECT_EQ(err.str().rfind("error: UNAVAILABLE: ", 0), 0u) << err.str();
  o.deadline = absl::ZeroDuration();
  err.str("");
  EXPECT_EQ(RunCli(o, {"models"}, in, out, err), 2);
  EXPECT_EQ(err.str(), "error: INVALID_ARGUMENT: --deadline must be > 0, got 0\n");
  o.deadline = absl::Seconds(2);
  o.connection.tls_ca = "/nonexistent/ca.pem";
  err.str("");
  EXPECT_EQ(RunCli(o, {"models"}, in, out, err), 1);
  EXPECT_EQ(err.str(), "error: NOT_FOUND: cannot open '/nonexistent/ca.pem'\n");
  // An empty CA file or a directory would have meant "trust the system roots" to gRPC.
  const std::string empty = ::testing::TempDir() + "empty-ca.pem";
  std::ofstream(empty).close();
  for (const std::string& path : {empty, ::testing::TempDir()}) {
    o.connection.tls_ca = path;
    err.str("");
    EXPECT_EQ(RunCli(o, {"models"}, in, out, err), 2);
    EXPECT_NE(err.str().find("INVALID_ARGUMENT: --tls_ca '" + path + "' is"), std::string::npos) << err.str();
  }
  o.connection.tls_ca.clear();
  o.connection.tls_cert = "/tmp/cert.pem";
  err.str("");
  EXPECT_EQ(RunCli(o, {"models"}, in, out, err), 2);
  EXPECT_NE(err.str().find("--tls_cert and --tls_key must be given together"), std::string::npos);
}

std::string Slurp(const std::string& path) {
  std::stringstream ss;
  ss << std::ifstream(path).rdbuf();
  return ss.str();
}

// TLS and mutual TLS against a fake server with a self-signed certificate made by openssl.
class CliTlsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ::testing::TempDir() + "odeserve_client_tls_" +
           ::testing::UnitTest::GetInstance()->current_test_info()->name();
    const std::string cmd =
        "mkdir -p " + dir_ + " && openssl req -x509 -newkey rsa:2048 -nodes -keyout " + dir_ +
        "/key.pem -out " + dir_ + "/cert.pem -days 2 -subj /CN=localhost -addext "
        "subjectAltName=DNS:localhost,IP:127.0.0.1 >/dev/null 2>&1";
    if (std::system(cmd.c_str()) != 0) GTEST_SKIP() << "openssl not available";
  }
  std::unique_ptr<testing::FakeServer> Start(bool require_client_cert) {
    grpc::SslServerCredentialsOptions ssl(
        require_client_cert ? GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY
                            : GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
    ssl.pem_key_cert_pairs.push_back({Slurp(dir_ + "/key.pem"), Slurp(dir_ + "/cert.pem")});
    if (require_client_cert) ssl.pem_root_certs = Slurp(dir_ + "/cert.pem");
    return std::make_unique<testing::FakeServer>(grpc::SslServerCredentials(ssl));
  }
  int Run(const CliOptions& o, std::vector<std::string> args) {
    std::istringstream in;
    out_.str("");
    err_.str("");
    return RunCli(o, args, in, out_, err_);
  }
  std::string dir_;
  std::ostringstream out_, err_;
};

TEST_F(CliTlsTest, ServerAuthentication) {
  auto server = Start(false);
  CliOptions o;
  o.connection.address = server->address();
  o.deadline = absl::Seconds(5);
  EXPECT_EQ(Run(o, {"models"}), 1) << "plaintext client against a TLS server must fail";
  o.connection.tls_ca = dir_ + "/cert.pem";
  EXPECT_EQ(Run(o, {"models"}), 0) << err_.str();
  EXPECT_NE(out_.str().find("emb"), std::string::npos);
  o.connection.address = absl::StrCat("localhost:", server->address().substr(10));
  EXPECT_EQ(Run(o, {"health"}), 0) << err_.str();
}

TEST_F(CliTlsTest, MutualTls) {
  auto server = Start(true);
  CliOptions o;
  o.connection.address = server->address();
  o.connection.tls_ca = dir_ + "/cert.pem";
  o.deadline = absl::Seconds(5);
  EXPECT_EQ(Run(o, {"models"}), 1) << "no client certificate must fail";
  o.connection.tls_cert = dir_ + "/cert.pem";
  o.connection.tls_key = dir_ + "/key.pem";
  o.connection.token = "tok";
  EXPECT_EQ(Run(o, {"models"}), 0) << err_.str();
  EXPECT_EQ(server->service().last_authorization(), "Bearer tok");
  EXPECT_EQ(err_.str().find("clear text"), std::string::npos) << "no warning over TLS";
}

}  // namespace
}  // namespace odeserve::client
