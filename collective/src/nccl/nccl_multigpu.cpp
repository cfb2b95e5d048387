#include "nccl/nccl_util.hpp"
