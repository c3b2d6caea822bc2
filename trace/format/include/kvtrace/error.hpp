#pragma once
// One error type for everything a user can get wrong: a bad file, dataset, value or option.
// what() is the single line the CLI prints before exiting with code 2.
#include <stdexcept>
#include <string>

namespace kvtrace {

class InputError : public std::runtime_error {
 public:
  // file and dataset may be empty; the message then leaves them out.
  InputError(std::string file, std::string dataset, const std::string& problem)
      : std::runtime_error(compose(file, dataset, problem)),
        file_(std::move(file)),
        dataset_(std::move(dataset)),
        problem_(problem) {}

  const std::string& file() const { return file_; }
  const std::string& dataset() const { return dataset_; }
  const std::string& problem() const { return problem_; }

 private:
  static std::string compose(const std::string& file, const std::string& dataset, const std::string& problem) {
    std::string line;
    if (!file.empty()) line += file + ": ";
    if (!dataset.empty()) line += dataset + ": ";
    return line + problem;
  }
  std::string file_, dataset_, problem_;
};

}  // namespace kvtrace
