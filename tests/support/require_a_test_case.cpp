// Linked into every doctest suite: a run in which no test case matched the
// filter fails instead of passing vacuously.
//
// CTest runs each case as `--test-case=<name>`, with the names discovered at
// build time. A name CTest cannot carry intact (CMake splits lists at ';')
// matched nothing, and doctest reported success with zero cases: such cases
// never ran. With this listener the run exits 1 and names the problem.
#include <cstdio>
#include <cstdlib>

#include <doctest/doctest.h>

namespace {

struct require_a_test_case : doctest::IReporter {
  explicit require_a_test_case(const doctest::ContextOptions&) {
    // nop
  }

  void report_query(const doctest::QueryData&) override {}
  void test_run_start() override {}
  void test_run_end(const doctest::TestRunStats& stats) override {
    if (stats.numTestCasesPassingFilters > 0) return;
    std::fputs("no test case matched the filter: nothing ran (a test case "
               "name with ';' cannot pass through CTest)\n",
               stderr);
    std::fflush(stderr);
    std::_Exit(1);
  }
  void test_case_start(const doctest::TestCaseData&) override {}
  void test_case_reenter(const doctest::TestCaseData&) override {}
  void test_case_end(const doctest::CurrentTestCaseStats&) override {}
  void test_case_exception(const doctest::TestCaseException&) override {}
  void subcase_start(const doctest::SubcaseSignature&) override {}
  void subcase_end() override {}
  void log_assert(const doctest::AssertData&) override {}
  void log_message(const doctest::MessageData&) override {}
  void test_case_skipped(const doctest::TestCaseData&) override {}
};

REGISTER_LISTENER("require_a_test_case", 1, require_a_test_case);

} // namespace
