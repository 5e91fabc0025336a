// loop.cc compiles bench/cpp/loop.cpp, the C++ twin, into this Go binary: its main
// becomes gotrain_loop_main, which main.go calls on the main goroutine's thread.
#define main gotrain_loop_main
#include "../../cpp/loop.cpp"
#undef main

extern "C" int gotrain_loop_in_go(int argc, char **argv) { return gotrain_loop_main(argc, argv); }
