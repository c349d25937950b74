# Sourced by bench/gpu_acceptance.sh and bench/gpu_perf.sh (with PY, ROOT and OUT set): the GPU machine
# has torch but not every dependency, so the wheels it lacks travel in .whl/ and are installed into
# /tmp/site; PYTHONPATH then reaches them and this checkout.
if [ -d .whl ] && compgen -G ".whl/*.whl" > /dev/null; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    > "$OUT/wheels.log" 2>&1 || echo "wheel install failed: see $OUT/wheels.log" >&2
  export PYTHONPATH="/tmp/site:$ROOT"
else
  export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
fi
