# Jobs a real Sidekiq 6.4 worker runs for the interop test: each records the arguments it was
# given, as JSON, where the Python side reads them back.
require 'json'
require 'sidekiq'

Sidekiq.configure_server do |config|
  # The test waits for a job due in a second: poll often, and skip the 10 s initial wait.
  config.options[:poll_interval_average] = 0.5
end

class InteropRecord
  include Sidekiq::Worker

  def perform(*args)
    Sidekiq.redis do |conn|
      conn.rpush('interop:ruby-ran', JSON.generate('jid' => jid, 'args' => args))
    end
  end
end

# Fails every run, with its backtrace kept; its retries wait an hour (the test moves them).
class InteropFail
  include Sidekiq::Worker
  sidekiq_retry_in { |_count, _exc| 3600 }

  def perform(*args)
    Sidekiq.redis { |conn| conn.rpush('interop:ruby-failed', JSON.generate('jid' => jid, 'args' => args)) }
    raise ArgumentError, "ruby failure #{args.inspect}"
  end
end

# Busy for ARGV seconds: what a dashboard shows running.
class InteropSlow
  include Sidekiq::Worker

  def perform(seconds)
    Sidekiq.redis { |conn| conn.rpush('interop:ruby-slow', jid) }
    sleep seconds
  end
end
