#define CATCH_CONFIG_RUNNER
#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdint>
#include <string>

#include "shmio/detail/platform.hpp"

namespace {

bool guard_recovered_unexpectedly = false;

// The truncation guard turns a fault in an RPC mapping into zero pages and a failed channel:
// a library bug that read past a file's end would pass unseen. Outside the tests that truncate
// files on purpose (tagged [hostile]), a test during which the guard recovered a fault fails.
class truncation_guard_watch : public Catch::TestEventListenerBase {
 public:
  using TestEventListenerBase::TestEventListenerBase;

  void testCaseStarting(const Catch::TestCaseInfo&) override {
    before_ = shmio::detail::platform::faults_recovered();
  }

  void testCaseEnded(const Catch::TestCaseStats& stats) override {
    const auto& tags = stats.testInfo.tags;
    const bool hostile = std::find(tags.begin(), tags.end(), "hostile") != tags.end();
    const auto recovered = shmio::detail::platform::faults_recovered() - before_;
    if (!hostile && recovered != 0) {
      Catch::cerr() << "error: '" << stats.testInfo.name << "' ran into " << recovered
                    << " fault(s) in RPC mappings that the truncation guard recovered\n";
      guard_recovered_unexpectedly = true;
    }
  }

 private:
  std::uint64_t before_ = 0;
};

}  // namespace

CATCH_REGISTER_LISTENER(truncation_guard_watch)

int main(int argc, char* argv[]) {
  const int result = Catch::Session().run(argc, argv);
  // Reported after the test case, where no assertion can run: the run as a whole fails.
  return result != 0 ? result : guard_recovered_unexpectedly ? 3 : 0;
}
