/* ctrain/ctrain.h - umbrella header. */
#ifndef CTRAIN_CTRAIN_H
#define CTRAIN_CTRAIN_H
#include "status.h"
#include "context.h"
#include "tensor.h"
#include "convert.h"
#include "graph.h"
#include "optim.h"
#include "data.h"
#include "image.h"
#include "models.h"
#include "recipe.h"
#include "amp.h"
#include "schedule.h"
#include "checkpoint.h"
#include "profile.h"
#include "text.h"
#include "metrics.h"
#include "tensorboard.h"
#include "train.h"
#include "dist.h"
#endif
