// The arguments of `mtia-emu run MODULE KERNEL ARG...`: one ARG per kernel parameter, in order.
//
//   i64:VALUE                   a 64-bit integer (decimal, or hexadecimal with 0x)
//   f32:VALUE, f64:VALUE        a floating-point number
//   dtype:NAME                  an element type: fp32 fp16 bf16 int8 int32 int64 bool
//   in:TYPE:FILE                a device buffer holding FILE's bytes, TYPE elements
//   in:TYPE:range(START,STOP[,STEP])
//                               a buffer holding START, START+STEP, ... up to (not with) STOP
//   in:TYPE:fill(COUNT,VALUE)   a buffer of COUNT elements, each VALUE
//   out:TYPE:COUNT:FILE         a buffer of COUNT elements, zero before the launch, written to
//                               FILE after it
// TYPE is an element type as for dtype; files hold the elements as the device stores them
// (little-endian, fp16/bf16 as 16-bit patterns, bool as one byte 0 or 1). Buffers are passed
// as ptr arguments; scalars as the kind they name.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "mtia/kernel.h"

namespace mtia::tools {

// An element type of a buffer, by its device dtype code (enum mtia_pe_dtype, isa/pe/pe_ops.h).
struct ElementType {
  uint8_t code = 0;
  std::string name;       // "fp32", ...
  uint32_t bytes = 0;     // size of one element
  bool floating = false;  // fp32, fp16, bf16
};

// The element type called `name`; throws std::invalid_argument listing the names otherwise.
ElementType element_type(const std::string& name);

// One parsed argument: a scalar, or a buffer with its initial bytes and, for out, its file.
struct RunArg {
  enum class Form { kScalar, kInput, kOutput };
  std::string text;  // as given on the command line, for messages
  Form form = Form::kScalar;
  Arg scalar{int64_t{0}};      // kScalar: the value, of the kind it names
  ElementType type;            // buffers: the element type
  uint64_t count = 0;          // buffers: elements
  std::vector<uint8_t> bytes;  // kInput: the initial contents (count * type.bytes bytes)
  std::string path;            // kOutput: where the result goes

  // The parameter kind this argument is passed as: kPointer for buffers.
  ArgKind kind() const;
  // "i64 scalar", "fp32 input buffer of 1024 elements", ... for messages.
  std::string describe() const;
};

// Parses one argument. Reads input files. Throws std::invalid_argument saying what is wrong
// with `text` and how it should be written.
RunArg parse_run_arg(const std::string& text);

// Checks parsed arguments against the kernel's parameters (count and kinds). Throws
// std::invalid_argument naming the first mismatch and the kernel's signature.
void check_run_args(const Kernel& kernel, const std::vector<RunArg>& args);

}  // namespace mtia::tools
