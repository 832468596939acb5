// A header-only unit-test framework for the C++ tests of tests/cpp/ (no
// download: the machine that builds emel may have no network). TEST(name)
// registers a test; CHECK(cond) and CHECK_EQ(a, b) record a failure with its
// file and line and let the test go on; REQUIRE(cond) stops the test. main()
// (mini_test_main.cpp) runs every test, or those whose name contains argv[1],
// prints one line per failure and a summary, and exits 1 on any failure.
#pragma once

#include <cstdio>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

namespace mini_test {

struct Test {
    const char* name;
    std::function<void()> body;
};

inline std::vector<Test>& registry() {
    static std::vector<Test> tests;
    return tests;
}

struct Failures {
    size_t in_test = 0;
    size_t total = 0;
};
inline Failures& failures() {
    static Failures f;
    return f;
}

struct Stop {};  // thrown by REQUIRE to end the current test

inline void fail(const char* file, int line, const std::string& what) {
    ++failures().in_test;
    ++failures().total;
    std::printf("  FAIL %s:%d: %s\n", file, line, what.c_str());
}

template <typename T>
std::string show(const T& v) {
    std::ostringstream s;
    s << v;
    return s.str();
}

struct Register {
    Register(const char* name, std::function<void()> body) { registry().push_back({name, std::move(body)}); }
};

inline int run_all(int argc, char** argv) {
    const std::string only = argc > 1 ? argv[1] : "";
    size_t ran = 0, failed = 0;
    for (const Test& t : registry()) {
        if (!only.empty() && std::string(t.name).find(only) == std::string::npos) continue;
        ++ran;
        failures().in_test = 0;
        try {
            t.body();
        } catch (const Stop&) {
        } catch (const std::exception& e) {
            fail(__FILE__, __LINE__, std::string("unexpected exception: ") + e.what());
        }
        const bool ok = failures().in_test == 0;
        failed += ok ? 0 : 1;
        std::printf("%s %s\n", ok ? "ok  " : "FAIL", t.name);
    }
    std::printf("%zu tests, %zu failed, %zu failed checks\n", ran, failed, failures().total);
    return failed == 0 && ran > 0 ? 0 : 1;
}

}  // namespace mini_test

#define MINI_TEST_CAT2(a, b) a##b
#define MINI_TEST_CAT(a, b) MINI_TEST_CAT2(a, b)
#define TEST(name)                                                                           \
    static void MINI_TEST_CAT(test_, name)();                                                \
    static const mini_test::Register MINI_TEST_CAT(register_, name)(#name, &MINI_TEST_CAT(test_, name)); \
    static void MINI_TEST_CAT(test_, name)()

#define CHECK(cond) \
    ((cond) ? (void)0 : mini_test::fail(__FILE__, __LINE__, "CHECK(" #cond ")"))
#define CHECK_EQ(a, b)                                                                        \
    do {                                                                                      \
        const auto& mini_a_ = (a);                                                            \
        const auto& mini_b_ = (b);                                                            \
        if (!(mini_a_ == mini_b_))                                                            \
            mini_test::fail(__FILE__, __LINE__,                                               \
                            "CHECK_EQ(" #a ", " #b "): " + mini_test::show(mini_a_) + " != " + \
                                mini_test::show(mini_b_));                                    \
    } while (0)
#define REQUIRE(cond)                                                                  \
    do {                                                                               \
        if (!(cond)) {                                                                 \
            mini_test::fail(__FILE__, __LINE__, "REQUIRE(" #cond ")");                 \
            throw mini_test::Stop{};                                                   \
        }                                                                              \
    } while (0)
