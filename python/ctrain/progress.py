"""ctrain.progress - the progress display of ctrain.train in Python (a
notebook does not see the C library's stdout): a tqdm bar when tqdm is
importable and the output is a notebook or a terminal, else plain lines every
`every` steps and one per evaluation."""
import sys
import time


class Progress:
    def __init__(self, mode=True, every=50, file=None):
        self.file = file or sys.stdout
        self.every = max(1, int(every or 50))
        self.bar = None
        self.use_tqdm = False
        interactive = "ipykernel" in sys.modules or (hasattr(self.file, "isatty") and self.file.isatty())
        if mode == "tqdm" or (mode in (True, "auto") and interactive):  # a log file gets plain lines
            try:
                import tqdm.auto  # noqa: F401
                self.use_tqdm = True
            except ImportError:
                self.use_tqdm = mode == "tqdm"
                if self.use_tqdm:
                    raise
        self.t0 = time.time()

    def step(self, m, total):
        if self.use_tqdm:
            if self.bar is None:
                import tqdm.auto
                self.bar = tqdm.auto.tqdm(total=total, unit="step", file=self.file, dynamic_ncols=True)
            self.bar.update(1)
            self.bar.set_postfix(loss="%.4f" % m["loss"], acc="%.2f%%" % (100 * m["acc"]), lr="%.3g" % m["lr"],
                                 refresh=False)
        elif m["step"] % self.every == 0 or m["step"] == total:
            print("step %d/%d  epoch %d  loss %.4f  acc %5.2f%%  lr %.3g  %.1fs"
                  % (m["step"], total, m["epoch"], m["loss"], 100 * m["acc"], m["lr"], m["time"]),
                  file=self.file, flush=True)

    def evaluation(self, e):
        line = "epoch %d  step %d  eval loss %.4f  eval acc %.2f%%" % (e["epoch"], e["step"], e["loss"],
                                                                       100 * e["accuracy"])
        if e.get("detail"):
            line += "  " + e["detail"]
        if self.bar is not None:
            self.bar.write(line, file=self.file)
        else:
            print(line, file=self.file, flush=True)

    def close(self):
        if self.bar is not None:
            self.bar.close()
            self.bar = None

    def summary(self, res):
        acc = "" if not res.evals or "ppl" in (res.evals[-1].get("detail") or "") \
            else ", eval accuracy %.2f%%" % (100 * res.eval_accuracy)
        print("done: %d steps in %.1f s, eval loss %.4f%s%s" % (res.steps, res.seconds, res.eval_loss, acc,
                                                              " (stopped early)" if res.stopped_early else ""),
              file=self.file, flush=True)
