/* ctrain/status.h - status codes returned by every fallible ctrain call.
 *
 * Every function that can fail returns ct_status. CT_OK is zero. On failure
 * the context that was passed in holds a message naming the problem and what
 * to do (ct_context_last_error). The library never exits or aborts on input.
 */
#ifndef CTRAIN_STATUS_H
#define CTRAIN_STATUS_H

#ifdef __cplusplus
extern "C" {
#endif

typedef enum ct_status {
    CT_OK = 0,
    CT_E_INVALID_ARG,  /* E40001 an argument is out of range or NULL          */
    CT_E_SHAPE,        /* E40003 tensor shapes do not fit the operation       */
    CT_E_DTYPE,        /* E40005 dtype mismatch between operands              */
    CT_E_UNSUPPORTED,  /* E50001 op not supported for this dtype / ISA        */
    CT_E_OOM,          /* E60003 out of memory or memory budget exceeded      */
    CT_E_IO,           /* E70001 file could not be opened / read / written    */
    CT_E_CORRUPT,      /* E70002 file is corrupt or truncated                 */
    CT_E_CONFIG,       /* E40010 malformed recipe / configuration             */
    CT_E_NONFINITE,    /* E40020 NaN or inf found in data or results          */
    CT_E_STATE,        /* E40030 call made in the wrong state (e.g. no plan)  */
    CT_E_INTERNAL,     /* E90001 a bug in ctrain; please report it            */
    CT_E_DIST,         /* E80001 the ranks of a distributed job disagree or a
                          collective failed (a rank died, MPI error)          */
    CT_STATUS_COUNT
} ct_status;

/* Short stable name, e.g. "CT_E_DTYPE". Never NULL. */
const char *ct_status_name(ct_status s);
/* Error code in the documented form, e.g. "E40005". Never NULL. */
const char *ct_status_code(ct_status s);
/* Generic advice for the status (what to do). Never NULL. */
const char *ct_status_advice(ct_status s);

#ifdef __cplusplus
}
#endif
#endif
