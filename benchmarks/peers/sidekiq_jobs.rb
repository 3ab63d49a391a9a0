# Ruby Sidekiq's side of the comparison:
#   ruby --yjit $(which sidekiq) -r ./benchmarks/peers/sidekiq_jobs.rb -c 10 -q default
# Redis comes from REDIS_URL. The keys are shared.py's COUNTER / LATENCY. Sidekiq runs as
# installed (redis-rb's own Ruby driver, its deprecation warnings on), except in the
# "sidekiq_tuned" row (BENCH_SIDEKIQ_TUNED=true): the hiredis driver when ruby-hiredis is
# installed, and redis-rb's deprecation warnings off (Debian pairs Sidekiq 6.4.1 with
# redis-rb 4.8, which warns on every BRPOP Sidekiq's fetch makes): settings a user would
# have to make, so a row of their own.
require 'sidekiq'

BENCH_REDIS = { url: ENV.fetch('REDIS_URL') }
if ENV['BENCH_SIDEKIQ_TUNED'] == 'true'
  begin
    require 'hiredis'
    BENCH_REDIS[:driver] = :hiredis
  rescue LoadError
    nil
  end
  Redis.silence_deprecations = true if Redis.respond_to?(:silence_deprecations=)
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
