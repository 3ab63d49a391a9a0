# Schedules, to the queue ARGV[0], a job already due whose options a Ruby app unset with nil
# (Sidekiq's client keeps each as JSON null); prints {"scheduled": jid}.
require 'json'
require 'sidekiq'

queue = ARGV.fetch(0)
unset = %w[unique_for unique_until expires_in retry retry_for retry_queue tags backtrace dead
           bid wrapped encrypt timeout result_ttl partition].to_h { |key| [key, nil] }
jid = Sidekiq::Client.push(unset.merge('class' => 'Interop::Record', 'queue' => queue,
                                       'args' => ['nil options'], 'at' => Time.now.to_f - 1))
puts JSON.generate('scheduled' => jid)
