# Ruby Sidekiq's side of the comparison:
#   ruby --yjit $(which sidekiq) -r ./benchmarks/peers/sidekiq_jobs.rb -c 10 -q default
# Redis comes from REDIS_URL. The hiredis driver is used when ruby-hiredis is installed
# (the fastest Sidekiq this machine can run). The keys are shared.py's COUNTER / LATENCY.
require 'sidekiq'

BENCH_REDIS = { url: ENV.fetch('REDIS_URL') }
begin
  require 'hiredis'
  BENCH_REDIS[:driver] = :hiredis
rescue LoadError
  nil
end
Sidekiq.configure_server do |config|
  config.redis = BENCH_REDIS
  # run.py sets BENCH_QUIET=true unless --job-logs: no "start"/"done" line per job.
  Sidekiq.logger.level = Logger::WARN if ENV['BENCH_QUIET'] == 'true'
end
Sidekiq.configure_client { |config| config.redis = BENCH_REDIS }

class BenchIncr
  include Sidekiq::Worker
  def perform
    Sidekiq.redis { |conn| conn.incr('bench:counter') }
  end
end

class BenchLatency
  include Sidekiq::Worker
  def perform(pushed_at)
    Sidekiq.redis { |conn| conn.rpush('bench:latency', Time.now.to_f - pushed_at) }
  end
end
