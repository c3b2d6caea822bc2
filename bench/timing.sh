# Sourced by the bench scripts (needs $tmp and $repeat set).
# run LABEL CMD...: REPEAT runs under /usr/bin/time -v; prints each run and the median wall
# time, CPU time (user + sys) and peak RSS; sets $wall and $cpu (median seconds) and $rss (the
# largest peak RSS, MiB).
median() { sort -g | awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }
run() {
  local label=$1; shift
  local walls=() cpus=() rsss=()
  for ((i = 0; i < repeat; ++i)); do
    /usr/bin/time -v -o "$tmp/time.txt" "$@" >"$tmp/out.txt" 2>"$tmp/err.txt" || {
      echo "$label failed:" >&2; cat "$tmp/err.txt" "$tmp/time.txt" >&2; exit 1; }
    local w c r
    c=$(awk -F': ' '/User time|System time/ { s += $2 } END { print s }' "$tmp/time.txt")
    w=$(awk -F': ' '/Elapsed \(wall clock\)/ { n = split($2, p, ":"); s = 0; for (i = 1; i <= n; ++i) s = s * 60 + p[i]; print s }' "$tmp/time.txt")
    r=$(awk -F': ' '/Maximum resident set size/ { printf "%.0f", $2 / 1024 }' "$tmp/time.txt")
    walls+=("$w"); cpus+=("$c"); rsss+=("$r")
  done
  wall=$(printf '%s\n' "${walls[@]}" | median)
  cpu=$(printf '%s\n' "${cpus[@]}" | median)
  rss=$(printf '%s\n' "${rsss[@]}" | sort -g | tail -1)
  printf '%-8s wall %8.2f s  CPU %8.2f s  peak RSS %6s MiB   (runs, wall/CPU s: %s)\n         %s\n' \
    "$label" "$wall" "$cpu" "$rss" "$(paste -d/ <(printf '%s\n' "${walls[@]}") <(printf '%s\n' "${cpus[@]}") | paste -sd' ')" "$*"
}
