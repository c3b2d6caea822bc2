#pragma once
namespace kvsim {
const char* version();
}
