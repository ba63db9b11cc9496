// The dataset reference is part of the public API (<saker/dataset_ref.hpp>).
#pragma once

#include "saker/dataset_ref.hpp"
