#include "umswap/cli/preload_library.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <fstream>

namespace umswap::cli {
namespace {

namespace fs = std::filesystem;

class PreloadLibraryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() / ("umswap_cli_preload_" + std::to_string(::getpid()));
    fs::remove_all(root_);
    fs::create_directories(root_ / "bin");
    fs::create_directories(root_ / "lib");
  }
  void TearDown() override { fs::remove_all(root_); }
  void touch(const fs::path& path) { std::ofstream(path) << ""; }

  fs::path root_;
};

TEST_F(PreloadLibraryTest, PrefersLibNextToBin) {
  touch(root_ / "lib" / "libumswap.so");
  touch(root_ / "bin" / "libumswap.so");
  const PreloadLibrary lib = find_preload_library(nullptr, root_ / "bin" / "umswap");
  EXPECT_EQ(lib.error, "");
  EXPECT_EQ(lib.path, (root_ / "lib" / "libumswap.so").string());
}

TEST_F(PreloadLibraryTest, FallsBackToBinDir) {
  touch(root_ / "bin" / "libumswap.so");
  const PreloadLibrary lib = find_preload_library("", root_ / "bin" / "umswap");
  EXPECT_EQ(lib.path, (root_ / "bin" / "libumswap.so").string());
}

TEST_F(PreloadLibraryTest, NotFoundSaysWhereItLooked) {
  const PreloadLibrary lib = find_preload_library(nullptr, root_ / "bin" / "umswap");
  EXPECT_EQ(lib.path, "");
  EXPECT_NE(lib.error.find((root_ / "lib" / "libumswap.so").string()), std::string::npos)
      << lib.error;
  EXPECT_NE(lib.error.find((root_ / "bin" / "libumswap.so").string()), std::string::npos)
      << lib.error;
}

TEST_F(PreloadLibraryTest, OverrideWinsAndIsMadeAbsolute) {
  touch(root_ / "lib" / "libumswap.so");
  touch(root_ / "other.so");
  const fs::path cwd = fs::current_path();
  fs::current_path(root_);
  const PreloadLibrary lib = find_preload_library("./other.so", root_ / "bin" / "umswap");
  fs::current_path(cwd);
  EXPECT_EQ(lib.path, (root_ / "other.so").string());
  const PreloadLibrary missing =
      find_preload_library((root_ / "nope.so").c_str(), root_ / "bin" / "umswap");
  EXPECT_EQ(missing.path, "");
  EXPECT_NE(missing.error.find("UMSWAP_LIBRARY"), std::string::npos) << missing.error;
}

TEST_F(PreloadLibraryTest, RefusesPathsLdPreloadCannotCarry) {
  fs::create_directories(root_ / "a b");
  touch(root_ / "a b" / "libumswap.so");
  const PreloadLibrary lib =
      find_preload_library((root_ / "a b" / "libumswap.so").c_str(), root_ / "bin" / "umswap");
  EXPECT_EQ(lib.path, "");
  EXPECT_NE(lib.error.find("LD_PRELOAD"), std::string::npos) << lib.error;
}

}  // namespace
}  // namespace umswap::cli
