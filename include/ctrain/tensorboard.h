/* ctrain/tensorboard.h - TensorBoard event files of a training run: the
 * scalars of the metrics log (metrics.h) as TensorBoard reads them, beside
 * it. `ctrain train --tensorboard-dir DIR` (recipe key tensorboard_dir)
 * writes one; `tensorboard --logdir DIR` shows it (docs/tensorboard.md).
 *
 *     ct_tensorboard *tb;
 *     ct_tensorboard_open(ctx, "runs/mlp", &tb);  // creates the folder
 *     const char *tags[] = {"train/loss"};
 *     double v[] = {0.25};
 *     ct_tensorboard_scalars(tb, 1, 1, tags, v);   // step 1
 *     ct_tensorboard_close(tb);                    // fsyncs
 *
 * A file is TFRecords (uint64 length, masked CRC32C of the length, the
 * serialized Event, masked CRC32C of it) of TensorFlow's Event protocol
 * buffer (proto/, encoded by protobuf-c); its first record is the
 * file_version event "brain.Event:2". Every event is flushed to the kernel
 * as it is written, so a crashed run loses nothing already logged; close
 * also fsyncs. Only rank 0 of a distributed run writes (as TensorBoard
 * users expect: one run, one curve). */
#ifndef CTRAIN_TENSORBOARD_H
#define CTRAIN_TENSORBOARD_H

#include <stdint.h>

#include "context.h"
#include "metrics.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ct_tensorboard ct_tensorboard;

/* Creates dir (and its parents) when missing and opens a new event file in
 * it, events.out.tfevents.<unix seconds>.<host name> (".<pid>" appended
 * when that file exists already), and writes the file_version event. An
 * unwritable or non-folder dir: CT_E_IO naming the path. */
ct_status ct_tensorboard_open(ct_context *ctx, const char *dir, ct_tensorboard **out);
/* The event file's path ("" for NULL). */
const char *ct_tensorboard_path(const ct_tensorboard *tb);
/* One event at `step` with n scalar values, tags[i] = values[i] (stored as
 * float, TensorBoard's simple_value; NaN and inf as they are), n in 1..64. */
ct_status ct_tensorboard_scalars(ct_tensorboard *tb, int64_t step, int n, const char *const *tags,
                                 const double *values);
/* The scalars of a metrics-log step line, same values (docs/tensorboard.md
 * lists the tags): train/loss, train/accuracy, train/lr,
 * train/samples_per_s, [train/grad_norm], [train/loss_scale], [perf/mfu],
 * [perf/peak_mib], [perf/comm_share] (the bracketed ones when >= 0). */
ct_status ct_tensorboard_log_step(ct_tensorboard *tb, const ct_metrics_step *s);
/* eval/loss and eval/accuracy at `step`; time_s as in ct_metrics_log_eval
 * (the next step's samples/s leaves the evaluation out). */
ct_status ct_tensorboard_log_eval(ct_tensorboard *tb, int64_t step, double test_loss, double test_acc, double time_s);
/* Flushes, fsyncs and closes (NULL is fine); reports a write error. */
ct_status ct_tensorboard_close(ct_tensorboard *tb);

#ifdef __cplusplus
}
#endif
#endif
