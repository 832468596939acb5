// The C++ unit tests' main(): runs every TEST of the files linked with it.
#include "mini_test.hpp"

int main(int argc, char** argv) { return mini_test::run_all(argc, argv); }
