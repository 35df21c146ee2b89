#pragma once
// Everything in tessera::nn: modules, layers, losses and initialisers.
#include "tessera/nn/activation.h"
#include "tessera/nn/attention.h"
#include "tessera/nn/container.h"
#include "tessera/nn/conv.h"
#include "tessera/nn/init.h"
#include "tessera/nn/linear.h"
#include "tessera/nn/loss.h"
#include "tessera/nn/module.h"
#include "tessera/nn/norm.h"
#include "tessera/nn/pooling.h"
