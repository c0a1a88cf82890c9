/* src/amp/scaler_history.h - the loss-scale history as text, for the
 * checkpoint's metadata (src/io/checkpoint.c; docs/checkpoint-format.md):
 * a JSON array of [step, "event", "scale as a C99 hex float", param,
 * "tensor"], oldest first. amp exports this header to the layers above
 * (tests/check_layers.sh); the rest of the scaler is include/ctrain/amp.h. */
#ifndef CT_AMP_SCALER_HISTORY_H
#define CT_AMP_SCALER_HISTORY_H

#include "ctrain/amp.h"

/* st->history[0 .. n_history) as JSON text (malloc'd; free it), or NULL
 * when out of memory. */
char *ct_scaler_history_to_json(const ct_scaler_state *st);
/* Parses that text into st->history and st->n_history (the rest of st is
 * left alone). CT_E_CORRUPT naming `what` for anything malformed. */
ct_status ct_scaler_history_from_json(ct_context *ctx, const char *what, const char *json, ct_scaler_state *st);

#endif
