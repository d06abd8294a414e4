// The file that tests/CMakeLists.txt's qkvlab_test_pch compiles to make the tests' precompiled header.
