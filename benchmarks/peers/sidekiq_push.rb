# Sidekiq's enqueue side, the Ruby twin of push.py:
#   ruby benchmarks/peers/sidekiq_push.rb single|bulk|paced JOBS [RATE] [MAX_SECONDS]
# Times itself after boot and prints {"seconds": ..., "jobs": ...}.
require 'json'
require_relative 'sidekiq_jobs'

BULK_SLICE = 1000 # shared.BULK_SLICE
SINGLE_CHUNK = 1000 # shared.SINGLE_CHUNK
WARMUP_TIMEOUT = 120.0

def clock
  Process.clock_gettime(Process::CLOCK_MONOTONIC)
end

def wait_for_warmup
  deadline = clock + WARMUP_TIMEOUT
  until Sidekiq.redis { |conn| conn.get('bench:counter').to_i } >= 1
    abort('warm-up job never ran: is the worker up?') if clock > deadline
    sleep 0.01
  end
end

def paced(jobs, rate)
  BenchIncr.perform_async
  wait_for_warmup
  start = clock
  jobs.times do |n|
    delay = start + n / rate - clock
    sleep delay if delay.positive?
    BenchLatency.perform_async(Time.now.to_f)
  end
  start
end

def singly(jobs, budget)
  start = clock
  pushed = 0
  while pushed < jobs && clock - start < budget
    chunk = [SINGLE_CHUNK, jobs - pushed].min
    chunk.times { BenchIncr.perform_async }
    pushed += chunk
  end
  pushed
end

mode, jobs, rate = ARGV[0], Integer(ARGV[1]), Float(ARGV[2] || 200)
budget = Float(ARGV[3] || Float::INFINITY)
start = clock
case mode
when 'single' then jobs = singly(jobs, budget)
when 'bulk'
  (0...jobs).step(BULK_SLICE) do |first|
    count = [BULK_SLICE, jobs - first].min
    Sidekiq::Client.push_bulk('class' => BenchIncr, 'args' => Array.new(count) { [] })
  end
when 'paced' then start = paced(jobs, Float(rate))
else abort("unknown mode #{mode}")
end
puts JSON.generate(seconds: clock - start, jobs: jobs)
