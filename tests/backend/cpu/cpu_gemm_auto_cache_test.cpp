// SPDX-License-Identifier: Apache-2.0
// The per-machine file of GemmLibrary::automatic's choices (gemm_auto_cache.hpp). Each test plays processes
// one after another in a directory of its own: reset_gemm_auto_choices() makes the next product start as a
// new process would, reading the environment and the file again. A later process takes the file's choice
// without measuring (and follows the file, whatever it says); a corrupt file is ignored with a warning naming
// it and rewritten; another machine's entry is kept but not used; TP_GEMM_CACHE=off writes nothing; a
// location that cannot be written warns once and the products go on.

#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "backend/cpu/kernel_test_support.hpp"
#include "backend/cpu/kernels/bf16_gemm.hpp"
#include "backend/cpu/kernels/gemm.hpp"
#include "backend/cpu/kernels/gemm_auto.hpp"
#include "backend/cpu/kernels/half_nn.hpp"
#include "tensorpool/core/log.hpp"

namespace {

namespace fs = std::filesystem;
using tp::backend::cpu::gemm_auto_choices;
using tp::backend::cpu::gemm_auto_measurements;
using tp::backend::cpu::GemmAutoChoice;
using tp::backend::cpu::GemmLibrary;
using tp::backend::cpu::matmul;
using tp::backend::cpu::Transpose;

// An environment variable's value, restored at the end of the test.
class SavedVariable {
 public:
  explicit SavedVariable(const char* name) : name_(name) {
    if (const char* value = std::getenv(name)) value_ = value;
  }
  SavedVariable(const SavedVariable&) = delete;
  SavedVariable& operator=(const SavedVariable&) = delete;
  ~SavedVariable() {
    if (value_) {
      ::setenv(name_, value_->c_str(), /*overwrite=*/1);
    } else {
      ::unsetenv(name_);
    }
  }

 private:
  const char* name_;
  std::optional<std::string> value_;
};

class GemmAutoCacheFile : public ::testing::Test {
 protected:
  void SetUp() override {
    directory_ = fs::temp_directory_path() / ("tp_gemm_auto_cache_" + std::to_string(::getpid()) + "_" +
                                              ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(directory_);
    fs::create_directories(directory_);
    ::setenv("TP_CACHE_DIR", directory_.c_str(), /*overwrite=*/1);
    ::unsetenv("TP_GEMM_CACHE");
    previous_level_ = tp::log::set_level(tp::log::Level::info);
    previous_sink_ =
        tp::log::set_sink([this](const tp::log::Record& record) { log_.push_back(tp::log::format_line(record)); });
    std::mt19937 rng(tp_test::test_seed());
    a_ = tp_test::random_vector<float>(rng, kM * kK);
    b_ = tp_test::random_vector<float>(rng, kK * kN);
    tp::backend::cpu::reset_gemm_auto_choices();  // the first process
  }
  void TearDown() override {
    tp::backend::cpu::reset_gemm_auto_choices();
    tp::log::set_sink(previous_sink_);
    tp::log::set_level(previous_level_);
    fs::remove_all(directory_);
  }

  fs::path file() const { return directory_ / "gemm-auto.json"; }

  // C = A B with `library`, for the test's shape (or a shape of another class).
  std::vector<float> product(GemmLibrary library, std::int64_t m = kM) const {
    std::vector<float> c(static_cast<std::size_t>(m * kN));
    matmul<float>(Transpose::no, Transpose::no, m, kN, kK, 1.0F, a_.data(), b_.data(), 0.0F, c.data(), library);
    return c;
  }

  // The one choice made so far in this "process".
  static GemmAutoChoice only_choice() {
    const std::vector<GemmAutoChoice> choices = gemm_auto_choices();
    EXPECT_EQ(choices.size(), 1U);
    return choices.empty() ? GemmAutoChoice{} : choices.front();
  }

  nlohmann::json read_file() const {
    std::ifstream in(file());
    return nlohmann::json::parse(in);
  }
  void write_file(const std::string& text) const { std::ofstream(file()) << text; }

  // How many lines logged so far contain every one of `fragments`.
  std::size_t logged(std::initializer_list<std::string> fragments) const {
    std::size_t lines = 0;
    for (const std::string& line : log_) {
      bool all = true;
      for (const std::string& fragment : fragments) all = all && line.find(fragment) != std::string::npos;
      lines += all ? 1 : 0;
    }
    return lines;
  }
  std::string log_text() const {
    std::string text;
    for (const std::string& line : log_) text += line + "\n";
    return text;
  }

  static constexpr std::int64_t kM = 48, kN = 40, kK = 100;  // class 64 x 64 x 128
  fs::path directory_;
  std::vector<float> a_, b_;
  std::vector<std::string> log_;
  tp::log::Sink previous_sink_;
  tp::log::Level previous_level_ = tp::log::Level::info;
  SavedVariable cache_dir_{"TP_CACHE_DIR"};
  SavedVariable gemm_cache_{"TP_GEMM_CACHE"};
};

GemmLibrary other_than(GemmLibrary library) {
  return library == GemmLibrary::onednn ? GemmLibrary::openblas : GemmLibrary::onednn;
}

TEST_F(GemmAutoCacheFile, ALaterProcessTakesTheFilesChoiceWithoutMeasuring) {
  TP_TRACE_SEED(tp_test::test_seed());
  const std::int64_t before = gemm_auto_measurements();
  const std::vector<float> first = product(GemmLibrary::automatic);
  ASSERT_EQ(gemm_auto_measurements(), before + 1);
  const GemmAutoChoice measured = only_choice();
  EXPECT_FALSE(measured.cached);
  // The file holds the choice, and only the file is left in the directory (no temporary).
  ASSERT_TRUE(fs::exists(file())) << log_text();
  const nlohmann::json entries = read_file().at("entries");
  ASSERT_EQ(entries.size(), 1U) << entries.dump();
  EXPECT_EQ(entries[0].at("class"), "64x64x128");
  EXPECT_EQ(entries[0].at("choice").at("library"), tp::backend::cpu::name_of(measured.library));
  EXPECT_EQ(std::distance(fs::directory_iterator(directory_), fs::directory_iterator()), 1);

  // A later process: the same choice, bits and rates, from the file.
  tp::backend::cpu::reset_gemm_auto_choices();
  EXPECT_EQ(product(GemmLibrary::automatic), first);
  EXPECT_EQ(gemm_auto_measurements(), before + 1) << "the later process measured again";
  const GemmAutoChoice cached = only_choice();
  EXPECT_TRUE(cached.cached);
  EXPECT_EQ(cached.library, measured.library);
  EXPECT_EQ(cached.shape.m, kM);
  EXPECT_EQ(cached.openblas_gflops, measured.openblas_gflops);
  EXPECT_EQ(cached.onednn_gflops, measured.onednn_gflops);

  // The file decides: edited to the other library, the next process computes with that one.
  nlohmann::json edited = read_file();
  const GemmLibrary flipped = other_than(measured.library);
  edited["entries"][0]["choice"]["library"] = tp::backend::cpu::name_of(flipped);
  write_file(edited.dump());
  tp::backend::cpu::reset_gemm_auto_choices();
  EXPECT_EQ(product(GemmLibrary::automatic), product(flipped));
  EXPECT_EQ(only_choice().library, flipped);
  EXPECT_EQ(gemm_auto_measurements(), before + 1);
}

TEST_F(GemmAutoCacheFile, ACorruptFileIsIgnoredWithAWarningNamingItAndRewritten) {
  TP_TRACE_SEED(tp_test::test_seed());
  for (const std::string contents : {R"({"entries": [{"machine": {"cpu")", "[1, 2]", ""}) {
    SCOPED_TRACE("file: " + contents);
    write_file(contents);
    log_.clear();
    tp::backend::cpu::reset_gemm_auto_choices();
    const std::int64_t before = gemm_auto_measurements();
    const std::vector<float> c = product(GemmLibrary::automatic);
    EXPECT_EQ(gemm_auto_measurements(), before + 1);
    EXPECT_EQ(c, product(only_choice().library));
    EXPECT_EQ(logged({"[cpu]", file().string(), "delete the file"}), 1U) << log_text();
    // Rewritten: a later process reads the choice from it, with no warning.
    EXPECT_EQ(read_file().at("entries").size(), 1U);
    log_.clear();
    tp::backend::cpu::reset_gemm_auto_choices();
    EXPECT_EQ(product(GemmLibrary::automatic), c);
    EXPECT_EQ(gemm_auto_measurements(), before + 1);
    EXPECT_TRUE(log_.empty()) << log_text();
  }
}

TEST_F(GemmAutoCacheFile, AnotherMachinesEntryIsKeptButNotUsed) {
  TP_TRACE_SEED(tp_test::test_seed());
  static_cast<void>(product(GemmLibrary::automatic));
  nlohmann::json edited = read_file();
  edited["entries"][0]["machine"]["cpu"] = "another CPU";
  write_file(edited.dump());
  tp::backend::cpu::reset_gemm_auto_choices();
  const std::int64_t before = gemm_auto_measurements();
  static_cast<void>(product(GemmLibrary::automatic));
  EXPECT_EQ(gemm_auto_measurements(), before + 1) << "another machine's entry was used";
  EXPECT_FALSE(only_choice().cached);
  const nlohmann::json entries = read_file().at("entries");
  ASSERT_EQ(entries.size(), 2U) << entries.dump();
  EXPECT_EQ(entries[0].at("machine").at("cpu"), "another CPU");
  EXPECT_NE(entries[1].at("machine").at("cpu"), "another CPU");
  EXPECT_EQ(entries[1].at("class"), "64x64x128");
}

TEST_F(GemmAutoCacheFile, OffWritesNothingAndEveryProcessMeasures) {
  TP_TRACE_SEED(tp_test::test_seed());
  ::setenv("TP_GEMM_CACHE", "off", /*overwrite=*/1);
  const std::int64_t before = gemm_auto_measurements();
  static_cast<void>(product(GemmLibrary::automatic));
  EXPECT_EQ(logged({"GEMM auto cache off", "TP_GEMM_CACHE=off"}), 1U) << log_text();
  tp::backend::cpu::reset_gemm_auto_choices();
  static_cast<void>(product(GemmLibrary::automatic));
  EXPECT_EQ(gemm_auto_measurements(), before + 2);
  EXPECT_TRUE(fs::is_empty(directory_));
  // An empty TP_CACHE_DIR turns it off too.
  ::unsetenv("TP_GEMM_CACHE");
  ::setenv("TP_CACHE_DIR", "", /*overwrite=*/1);
  tp::backend::cpu::reset_gemm_auto_choices();
  static_cast<void>(product(GemmLibrary::automatic));
  EXPECT_EQ(gemm_auto_measurements(), before + 3);
  EXPECT_EQ(logged({"GEMM auto cache off", "TP_CACHE_DIR is set to the empty string"}), 1U) << log_text();
}

TEST_F(GemmAutoCacheFile, AnUnwritableLocationWarnsOnceAndTheProductsGoOn) {
  TP_TRACE_SEED(tp_test::test_seed());
  // Under a regular file no directory can be made, even for root.
  std::ofstream(directory_ / "a-file") << "not a directory";
  const fs::path location = directory_ / "a-file" / "cache";
  ::setenv("TP_CACHE_DIR", location.c_str(), /*overwrite=*/1);
  const std::int64_t before = gemm_auto_measurements();
  const std::vector<float> c = product(GemmLibrary::automatic);
  EXPECT_EQ(c, product(only_choice().library));
  static_cast<void>(product(GemmLibrary::automatic, 3 * kM));  // class 256 x 64 x 128
  EXPECT_EQ(gemm_auto_measurements(), before + 2);
  EXPECT_EQ(logged({"GEMM auto cache not saved", location.string()}), 1U) << log_text();
  EXPECT_EQ(log_.size(), 1U) << log_text();
}

// The bfloat16 product's path (half_nn.cpp: oneDNN's bfloat16 kernels, the same padded to an AMX tile's depth,
// or the float32 GEMM on widened operands) is kept in the same file: a later process follows it, and a name
// that is not one of this CPU's paths is measured again and rewritten.
TEST_F(GemmAutoCacheFile, ABfloat16ProductsPathIsKeptForALaterProcess) {
  using tp::BFloat16;
  if (!tp::backend::cpu::bf16_gemm_native()) {
    GTEST_SKIP() << "this CPU has no AVX512_BF16: the bfloat16 product has one path, nothing is chosen";
  }
  TP_TRACE_SEED(tp_test::test_seed());
  constexpr std::int64_t kRows = 32, kCols = 512, kDepth = 784;  // the main job's forward product at batch 32
  std::mt19937 rng(tp_test::test_seed());
  std::vector<BFloat16> a, b;
  for (const float value : tp_test::random_vector<float>(rng, kRows * kDepth)) a.push_back(BFloat16::from_float(value));
  for (const float value : tp_test::random_vector<float>(rng, kDepth * kCols)) b.push_back(BFloat16::from_float(value));
  const auto product_bf16 = [&] {
    std::vector<BFloat16> c(kRows * kCols);
    tp::backend::cpu::matmul_half<BFloat16>(Transpose::no, Transpose::no, kRows, kCols, kDepth, a.data(), b.data(),
                                            c.data(), GemmLibrary::openblas);
    return c;
  };
  const auto by_path = [&](const std::string& path) {
    std::vector<BFloat16> c(kRows * kCols);
    if (path == "widened") {
      tp::backend::cpu::matmul_half_widened<BFloat16>(Transpose::no, Transpose::no, kRows, kCols, kDepth, a.data(),
                                                      b.data(), c.data(), GemmLibrary::openblas);
    } else {
      tp::backend::cpu::matmul_bf16_onednn(Transpose::no, Transpose::no, kRows, kCols, kDepth, a.data(), b.data(),
                                           c.data());
    }
    return c;
  };
  ASSERT_NE(by_path("native"), by_path("widened")) << "the two paths must differ for this test to tell them apart";
  const std::string product_class = "bfloat16 32x512x784 (float32 via openblas)";
  const auto entry_path = [&]() -> std::string {
    const nlohmann::json contents = read_file();
    for (const nlohmann::json& entry : contents.at("entries")) {
      if (entry.at("class") == product_class) return entry.at("choice").at("path").get<std::string>();
    }
    return "(no entry)";
  };

  const std::vector<BFloat16> first = product_bf16();
  const std::string chosen = entry_path();
  ASSERT_TRUE(chosen == "native" || chosen == "widened") << chosen << "\n" << read_file().dump(2);
  EXPECT_EQ(first, by_path(chosen));

  // The file decides: edited to the other path, the next process computes with that one.
  const std::string other = chosen == "native" ? "widened" : "native";
  nlohmann::json edited = read_file();
  for (nlohmann::json& entry : edited["entries"]) {
    if (entry.at("class") == product_class) entry["choice"]["path"] = other;
  }
  write_file(edited.dump());
  tp::backend::cpu::reset_gemm_auto_choices();
  EXPECT_EQ(product_bf16(), by_path(other));
  EXPECT_EQ(entry_path(), other);

  // A path this CPU has not: measured again, and the file rewritten with a real one, with no warning.
  for (nlohmann::json& entry : edited["entries"]) {
    if (entry.at("class") == product_class) entry["choice"]["path"] = "tensor cores";
  }
  write_file(edited.dump());
  log_.clear();
  tp::backend::cpu::reset_gemm_auto_choices();
  const std::vector<BFloat16> again = product_bf16();
  const std::string rewritten = entry_path();
  EXPECT_TRUE(rewritten == "native" || rewritten == "widened") << rewritten;
  EXPECT_EQ(again, by_path(rewritten));
  EXPECT_TRUE(log_.empty()) << log_text();
}

}  // namespace
